// Builders for the boot decision's inputs, shared by the unit and property tests of boots.
import type { BootAnnouncement, BootRecord, BootStage } from '../../src/api/boot-record.ts';
import type { BootInput, BootNodeFacts } from '../../src/boots/decide.ts';
import type { HookRunRecord } from '../../src/hooks/plan.ts';
import type { HookObject } from '../../src/hooks/select.ts';
import { T0 } from './action-fixtures.ts';

export function bootNode(options: Partial<BootNodeFacts> = {}): BootNodeFacts {
  return {
    name: 'w1',
    uid: 'uid-node-w1',
    labels: { 'kubernetes.io/hostname': 'w1', pool: 'storage' },
    bootID: 'boot-1',
    ready: true,
    tainted: false,
    ...options,
  };
}

export function bootInput(partial: Partial<BootInput> = {}): BootInput {
  return {
    now: T0,
    node: bootNode(),
    hooks: [],
    jobs: new Map(),
    webhooks: new Map(),
    actions: new Map(),
    nodeJobs: [],
    ...partial,
  };
}

/** A finished (or running) run of a hook, as a record holds it. */
export function runOf(hook: HookObject, phase: HookRunRecord['phase'], extra: Partial<HookRunRecord> = {}) {
  const run: HookRunRecord = {
    kind: hook.kind,
    namespace: hook.metadata.namespace,
    name: hook.metadata.name,
    uid: hook.metadata.uid,
    attempt: 1,
    failurePolicy: hook.spec.failurePolicy ?? 'Fail',
    phase,
    jobName: `${hook.metadata.name}-job`,
    startTime: T0.toISOString(),
    ...extra,
  };
  return run;
}

/** A stage that covers these hooks, in this phase, each with one run in `runPhase`. */
export function stage(
  hooks: readonly HookObject[],
  phase: BootStage['phase'],
  runPhase: HookRunRecord['phase'] = phase === 'Failed' ? 'Failed' : phase === 'Pending' ? 'Pending' : phase,
): BootStage {
  return {
    phase,
    hooks: hooks.map((h) => h.metadata.uid),
    runs: phase === 'Pending' ? [] : hooks.map((h) => runOf(h, runPhase)),
    message: `stage ${phase}`,
    time: T0.toISOString(),
  };
}

/** A record of `bootID` whose NodePrereadyJobs and NodeReadyJobs are done. */
export function doneRecord(
  bootID: string,
  prereadys: readonly HookObject[],
  readys: readonly HookObject[],
  extra: Partial<BootRecord> = {},
): BootRecord {
  return { bootID, preready: stage(prereadys, 'Succeeded'), ready: stage(readys, 'Succeeded'), ...extra };
}

export function announcement(bootID: string, uid = 'uid-action-1', name = 'reboot-w1'): BootAnnouncement {
  return {
    action: { name, uid, action: 'Reboot', parameters: {} },
    bootID,
    time: T0.toISOString(),
  };
}
