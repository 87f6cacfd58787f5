// Structured JSON logs (pino). Every line about an action names it and its node; every
// line about a check names the check.
import { pino, type DestinationStream, type Logger as PinoLogger } from 'pino';
import { redactURLs } from './redact.ts';

export type Logger = PinoLogger;

/** A logged value with every URL credential in its strings redacted (a few levels deep). */
function redacted(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') return redactURLs(value);
  if (depth > 4 || value === null || typeof value !== 'object') return value;
  if (value instanceof Error) {
    // Same class (pino's serializer names it), message and stack redacted.
    const copy = Object.assign(Object.create(Object.getPrototypeOf(value) as object) as Error, value);
    copy.message = redactURLs(value.message);
    if (value.stack !== undefined) copy.stack = redactURLs(value.stack);
    return copy;
  }
  if (Array.isArray(value)) return value.map((v) => redacted(v, depth + 1));
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redacted(v, depth + 1)]));
}

export function createLogger(
  options: { level?: string; name?: string; destination?: DestinationStream } = {},
): Logger {
  const settings: pino.LoggerOptions = {
    name: options.name ?? 'gatehouse',
    level: options.level ?? process.env.GATEHOUSE_LOG_LEVEL ?? 'info',
    base: undefined,
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: {
      level: (label) => ({ level: label }),
      // Log lines go to log stores many can read: no URL credential in them.
      log: (object) => redacted(object) as Record<string, unknown>,
    },
    hooks: {
      logMethod(args, method) {
        method.apply(
          this,
          args.map((a) => (typeof a === 'string' ? redactURLs(a) : a)) as Parameters<typeof method>,
        );
      },
    },
  };
  return options.destination ? pino(settings, options.destination) : pino(settings);
}

/** A logger that drops everything, for tests and benchmarks that do not read logs. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
