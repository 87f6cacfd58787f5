// Refusals of the /v1 API: a status, a message that says what to fix, and where it
// helps, the fields at fault and response headers (WWW-Authenticate, Retry-After).
import { HttpError, type Reply } from './router.ts';

export interface FieldProblem {
  /** Where in the request, e.g. spec.upgrade.image. */
  field: string;
  message: string;
}

export class ApiError extends HttpError {
  readonly headers: Record<string, string>;
  readonly details: FieldProblem[];

  constructor(
    status: number,
    message: string,
    options: { headers?: Record<string, string>; details?: FieldProblem[] } = {},
  ) {
    super(status, message);
    this.headers = options.headers ?? {};
    this.details = options.details ?? [];
  }
}

/** The body every refusal has: `error`, and `details` when fields are at fault. */
export function errorReply(error: HttpError): Reply {
  const details = error instanceof ApiError && error.details.length > 0 ? { details: error.details } : {};
  return {
    status: error.status,
    body: { error: error.message, ...details },
    ...(error instanceof ApiError && Object.keys(error.headers).length > 0 ? { headers: error.headers } : {}),
  };
}
