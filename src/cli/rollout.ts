// Rolling an action through nodes: one NodeAction per node, `concurrency` at a time
// (the controller's policies still decide what is approved), each followed to its end —
// or, with --external, to Approved. The first action that fails stops new ones from
// starting; the ones in flight are followed to their end. An interrupt cancels every
// action in flight and waits (briefly) to see them cancelled.
import { PHASES, isTerminal } from '../api/phases.ts';
import { errorMessage } from '../wait.ts';
import type { ActionObject, Backend, CreateOptions, Progress, RequestSpec } from './backend.ts';
import type { LiveDisplay } from './display.ts';
import { CliError, EXIT, type ExitCode } from './exit.ts';
import { outcomeLine } from './progress.ts';
import type { Style } from './style.ts';

export interface RolloutOptions {
  backend: Backend;
  specs: readonly RequestSpec[];
  concurrency: number;
  /** Stop following once Approved: the caller performs the action (talosctl) and marks it executed. */
  external: boolean;
  display: LiveDisplay;
  style: Style;
  createOptions?: (spec: RequestSpec) => CreateOptions;
  /** Aborted on Ctrl-C. */
  interrupt: AbortSignal;
  /** How long to wait for cancelled actions to show Cancelled after an interrupt. */
  cancelWaitMs?: number;
}

export interface NodeOutcome {
  node: string;
  /** Absent when the action was never created. */
  action?: ActionObject;
  progress?: Progress;
  code: ExitCode;
  note?: string;
}

export interface RolloutResult {
  outcomes: NodeOutcome[];
  code: ExitCode;
}

/** Which exit code wins when several actions ended differently. */
const PRECEDENCE: readonly ExitCode[] = [
  EXIT.interrupted,
  EXIT.unreachable,
  EXIT.timedOut,
  EXIT.usage,
  EXIT.failed,
  EXIT.cancelled,
  EXIT.ok,
];

export function worstCode(codes: readonly ExitCode[]): ExitCode {
  return PRECEDENCE.find((c) => codes.includes(c)) ?? EXIT.ok;
}

export function codeOf(progress: Progress, external: boolean): ExitCode {
  const phase = progress.action?.status?.phase;
  if (!progress.action) return EXIT.cancelled;
  if (phase === 'Succeeded') return EXIT.ok;
  if (external && phase === 'Approved') return EXIT.ok;
  if (phase !== undefined && PHASES[phase].handsOver) return EXIT.ok;
  if (phase === 'Cancelled') return EXIT.cancelled;
  // A node that does not exist is a wrong argument however the CLI connects: with a
  // kubeconfig it is found before anything is requested, through --server once the
  // action is Denied for it (the HTTP API shows nodes only along with an action).
  if (phase === 'Denied' && progress.node?.exists === false) return EXIT.usage;
  return EXIT.failed;
}

export async function rollout(options: RolloutOptions): Promise<RolloutResult> {
  const { backend, display, style } = options;
  const outcomes: NodeOutcome[] = options.specs.map((s) => ({
    node: s.nodeName,
    code: EXIT.ok,
    note: 'not started',
  }));
  let next = 0;
  let stopStarting = false;

  const run = async (index: number): Promise<void> => {
    const spec = options.specs[index];
    const outcome = outcomes[index];
    if (!spec || !outcome) return;
    delete outcome.note;
    let action: ActionObject;
    try {
      action = await backend.createAction(spec, options.createOptions?.(spec));
    } catch (error) {
      const failure = error instanceof CliError ? error : new CliError(errorMessage(error), EXIT.failed);
      outcome.code = failure.code;
      outcome.note = failure.message;
      display.note(`${style.bad('✗')} ${spec.nodeName} ${spec.action}: ${failure.message}`);
      stopStarting = true;
      return;
    }
    const name = action.metadata.name;
    outcome.action = action;
    let latest: Progress = { action, node: undefined };
    const observe = (p: Progress) => {
      latest = p;
      if (p.action) outcome.action = p.action;
      display.update(name, p);
    };
    observe(latest);
    // Followed until it ends, or until it is the caller's turn (Approved, --external) or
    // a person's (a Maintenance held until released).
    const until = (p: Progress) => {
      const phase = p.action?.status?.phase;
      return phase !== undefined && ((options.external && phase === 'Approved') || PHASES[phase].handsOver);
    };
    try {
      latest = await backend.follow(name, observe, {
        until,
        signal: options.interrupt,
      });
    } catch (error) {
      if (!options.interrupt.aborted) {
        const failure =
          error instanceof CliError ? error : new CliError(errorMessage(error), EXIT.unreachable);
        outcome.code = failure.code;
        outcome.note = failure.message;
        display.finish(
          name,
          `${style.bad('✗')} ${spec.nodeName} ${spec.action} (${name}): ${failure.message}`,
        );
        stopStarting = true;
        return;
      }
      latest = await cancelInFlight(options, name, latest, observe);
      outcome.progress = latest;
      outcome.code = EXIT.interrupted;
      display.finish(name, outcomeLine(name, latest, style));
      return;
    }
    outcome.progress = latest;
    outcome.code = codeOf(latest, options.external);
    if (outcome.code !== EXIT.ok) stopStarting = true;
    display.finish(name, outcomeLine(name, latest, style));
  };

  const worker = async (): Promise<void> => {
    while (!stopStarting && !options.interrupt.aborted && next < options.specs.length) {
      await run(next++);
    }
  };
  await Promise.all(
    Array.from({ length: Math.max(1, Math.min(options.concurrency, options.specs.length)) }, worker),
  );
  const codes = outcomes.filter((o) => o.note !== 'not started').map((o) => o.code);
  const code = options.interrupt.aborted ? EXIT.interrupted : worstCode(codes);
  return { outcomes, code };
}

/** Ctrl-C: cancel the action and watch it reach Cancelled (or vanish), for a while. */
async function cancelInFlight(
  options: RolloutOptions,
  name: string,
  latest: Progress,
  observe: (p: Progress) => void,
): Promise<Progress> {
  const { backend, display, style } = options;
  if (latest.action && isTerminal(latest.action.status?.phase)) return latest;
  display.note(`${style.warn('!')} interrupted: cancelling ${name}`);
  try {
    await backend.cancel(name);
  } catch (error) {
    display.note(`${style.bad('✗')} could not cancel ${name}: ${errorMessage(error)}`);
    return latest;
  }
  try {
    return await backend.follow(name, observe, {
      signal: AbortSignal.timeout(options.cancelWaitMs ?? 30_000),
    });
  } catch {
    display.note(`${style.warn('!')} ${name} is being cancelled; not waiting any longer`);
    return latest;
  }
}
