// Structured JSON logs (pino). Every line about an action names it and its node; every
// line about a check names the check.
import { pino, type Logger as PinoLogger } from 'pino';

export type Logger = PinoLogger;

export function createLogger(options: { level?: string; name?: string } = {}): Logger {
  return pino({
    name: options.name ?? 'gatehouse',
    level: options.level ?? process.env.GATEHOUSE_LOG_LEVEL ?? 'info',
    base: undefined,
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  });
}

/** A logger that drops everything, for tests and benchmarks that do not read logs. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
