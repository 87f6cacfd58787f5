// Exit codes of the gatehouse CLI, one meaning each, so that scripts can branch on them.
// Every command's help lists them (EXIT_CODES_HELP).

export const EXIT = {
  /** Everything asked for happened: actions Succeeded (with --external: reached Approved), checks healthy. */
  ok: 0,
  /** An action Failed or was Denied, a check is not healthy, or the request was refused (403, conflict). */
  failed: 1,
  /** The command line or the request is wrong: unknown flag, missing --reason, an invalid field. */
  usage: 2,
  /** An action was cancelled by someone else while the command followed it. */
  cancelled: 3,
  /** The cluster or the gatehouse API cannot be reached, or does not accept our credentials. */
  unreachable: 4,
  /** `gatehouse gate --timeout` ran out before the action was Approved (it was cancelled). */
  timedOut: 5,
  /** Interrupted (Ctrl-C): the actions in flight were cancelled first. 128 + SIGINT, as shells report it. */
  interrupted: 130,
} as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

export const EXIT_CODES_HELP = `
Exit codes:
  0    success (actions Succeeded; with --external, Approved; checks healthy)
  1    an action Failed or was Denied, a check is unhealthy, or the request was refused
  2    usage error: bad flags or arguments, or a request the API rejects as invalid
  3    an action was cancelled by someone else
  4    cannot reach the cluster or the gatehouse API, or the credentials were not accepted
  5    gatehouse gate --timeout: not Approved in time (the action was cancelled)
  130  interrupted with Ctrl-C (actions in flight were cancelled first)
`;

/** An error the CLI reports as one line on stderr, exiting with `code`. */
export class CliError extends Error {
  override readonly name = 'CliError';
  readonly code: ExitCode;
  constructor(message: string, code: ExitCode) {
    super(message);
    this.code = code;
  }
}

/**
 * Wraps a command's action: a CliError is reported as one line on stderr and becomes the
 * exit code; anything else propagates (a bug, reported with exit code 1 by main).
 */
export function handled<A extends unknown[]>(
  action: (...args: A) => Promise<void>,
): (...args: A) => Promise<void> {
  return async (...args: A) => {
    try {
      await action(...args);
    } catch (error) {
      if (!(error instanceof CliError)) throw error;
      process.stderr.write(`gatehouse: ${error.message}\n`);
      process.exitCode = error.code;
    }
  };
}
