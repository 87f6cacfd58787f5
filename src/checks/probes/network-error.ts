// Connection errors in words. Node reports a connection that failed on every address of
// a name (localhost: ::1 and 127.0.0.1) as an AggregateError whose own message is empty.
import { errorMessage } from '../../wait.ts';

export function describeNetworkError(error: unknown): string {
  if (error instanceof AggregateError && error.errors.length > 0) {
    const reasons = [...new Set(error.errors.map((e) => errorMessage(e)))];
    return reasons.join('; ');
  }
  const message = errorMessage(error);
  if (message) return message;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' ? code : 'connection failed';
}
