// What the Talos executor (execution.ts) knows of a Managed action's steps, as the pure
// decision core reads it (src/actions): plain data, so the core imports no effect module.
import type { DrainBlocker } from '../api/node-action.ts';

/**
 * The steps of a Managed action the Talos executor makes (executor.ts); rollback: an
 * upgrade whose post-checks failed; snapshot: the etcd snapshot an ActionPolicy asks for
 * before a control-plane action is approved (etcd-snapshot-step.ts), Managed or External;
 * commit: a ConfigChange applied in TRY mode, confirmed by checks (phases/try-confirm.ts).
 */
export type ExecutionStep =
  'prepare' | 'drain' | 'install' | 'call' | 'verify' | 'rollback' | 'snapshot' | 'commit';

/** A snapshot step's result: what was stored, where, and what was pruned (etcd-snapshot-step.ts). */
export interface EtcdSnapshotFacts {
  name: string;
  /** Credentials redacted. */
  url: string;
  member: string;
  size: number;
  sha256: string;
  raftIndex: number;
  pruned: string[];
}

/** What the Talos executor knows of one step of an action; in memory, so lost with the process. */
export interface ExecutionStepFacts {
  state: 'running' | 'succeeded' | 'failed';
  /** Progress while it runs; its result, or its error, once it is over. */
  message: string;
  /** A failed call: whether it may still have reached Talos (no answer in time, cancelled). */
  mayHaveReached?: boolean;
  /**
   * A verify step (a call recorded by a process that is gone): whether the node's events
   * since its boot show the sequence the call starts, i.e. whether the call reached it.
   */
  reached?: boolean;
  /** A call on a control-plane node: what the etcd leadership hand-off before it did, in words. */
  handOff?: string;
  /** An install the installer failed: its exit code (installer-exit.ts says what it means). */
  exitCode?: number;
  /** A call Talos acknowledged: whether the node reboots or goes down because of it. */
  disrupts?: boolean;
  /** A running drain: the pods whose eviction is refused now (drain.ts), longest refused first. */
  blockers?: DrainBlocker[];
  /** A failed drain: it timed out (pods left that could not be evicted), not an error. */
  timedOut?: boolean;
  /** A snapshot step that succeeded: the snapshot stored. */
  snapshot?: EtcdSnapshotFacts;
}

export type ExecutionFacts = Partial<Record<ExecutionStep, ExecutionStepFacts>>;
