// Approval hooks, decided: the action waits (status.approval.pending names the hook and
// who may approve), an approver's answer decides the hook — Approve goes on, Refuse ends
// the action Denied with their words, both recorded — and a requester's own approval,
// a stale answer for another hook, or no answer within the timeout never approve.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decide } from '../../src/actions/decide.ts';
import type { ActionInput } from '../../src/actions/observations.ts';
import { approvalAnswer } from '../../src/actions/phases/person-approval.ts';
import {
  APPROVAL_ANNOTATION,
  APPROVAL_BY_ANNOTATION,
  APPROVAL_FOR_ANNOTATION,
  APPROVAL_REASON_ANNOTATION,
} from '../../src/api/names.ts';
import type { HookSpec } from '../../src/api/hooks.ts';
import type { NodeActionStatus } from '../../src/api/node-action.ts';
import { approvalRefusal } from '../../src/http/actions/approve.ts';
import type { HookObject } from '../../src/hooks/select.ts';
import { action, at, hook, input, T0, webhookHook } from './action-fixtures.ts';

function approvalHook(
  name: string,
  approval: NonNullable<HookSpec['approval']> = {},
  timeout = '1h',
): HookObject {
  const h = hook('PreRebootJob', name, { approval, timeout });
  delete h.spec.template;
  return h;
}

const ref = (h: HookObject) => `PreRebootJob/${h.metadata.namespace}/${h.metadata.name}`;

function answered(decision: string, by: string, hookRef: string, why = 'CHG-1234 approved') {
  return {
    annotations: {
      [APPROVAL_ANNOTATION]: decision,
      [APPROVAL_BY_ANNOTATION]: by,
      [APPROVAL_REASON_ANNOTATION]: why,
      [APPROVAL_FOR_ANNOTATION]: hookRef,
    },
  };
}

/** The action at its pre-hooks with these hooks, decided once: it waits. */
function waiting(hooks: HookObject[]): { first: ActionInput; status: NodeActionStatus } {
  const first = input({
    action: action(
      {},
      { phase: 'RunningPreHooks', startTime: T0.toISOString(), phaseTime: T0.toISOString() },
    ),
    hooks,
  });
  return { first, status: decide(first).status };
}

function later(first: ActionInput, status: NodeActionStatus, seconds: number, metadata = {}): ActionInput {
  return { ...first, now: at(seconds), action: action({}, status, metadata) };
}

describe('an approval hook', () => {
  it('waits, naming the hook and its approvers, with an Event once', () => {
    const h = approvalHook('storage', {
      message: 'storage on-call decides',
      approvers: { groups: ['storage'] },
    });
    const first = input({
      action: action(
        {},
        { phase: 'RunningPreHooks', startTime: T0.toISOString(), phaseTime: T0.toISOString() },
      ),
      hooks: [h],
    });
    const d = decide(first);
    assert.equal(d.status.phase, 'RunningPreHooks');
    assert.deepEqual(d.status.approval?.pending, {
      hook: ref(h),
      message: 'storage on-call decides',
      groups: ['storage'],
      allowSelfApproval: false,
      since: T0.toISOString(),
    });
    assert.match(
      d.status.message ?? '',
      /waiting for approval by a holder of the verb approve who is group storage/,
    );
    assert.ok(d.effects.some((e) => e.type === 'event' && e.reason === 'ApprovalRequested'));
    assert.ok(!d.effects.some((e) => e.type === 'createJob' || e.type === 'callWebhook'));
    const again = decide(later(first, d.status, 60));
    assert.ok(
      !again.effects.some((e) => e.type === 'event' && e.reason === 'ApprovalRequested'),
      'asked once',
    );
    assert.equal(again.status.approval?.pending?.since, T0.toISOString());
  });

  it('goes on once approved, recording who and why, and asks for nothing more', () => {
    const h = approvalHook('storage');
    const { first, status } = waiting([h]);
    const d = decide(later(first, status, 30, answered('Approve', 'bob', ref(h))));
    assert.equal(d.status.phase, 'Approved');
    assert.equal(d.status.approval?.pending, undefined);
    assert.deepEqual(d.status.approval?.decisions, [
      {
        hook: ref(h),
        decision: 'Approved',
        by: 'bob',
        reason: 'CHG-1234 approved',
        time: at(30).toISOString(),
      },
    ]);
    assert.ok(d.effects.some((e) => e.type === 'event' && e.reason === 'ApprovalGranted'));
  });

  it('ends Denied with the approver’s words when refused, undoing what ran before it', () => {
    const noout = webhookHook('PreRebootJob', 'noout', { order: -1 });
    noout.spec.undo = { webhook: { service: { name: 'hooks', port: 8443 }, path: '/unset' } };
    const h = approvalHook('storage');
    const { first, status } = waiting([noout, h]);
    const done = status.hooks?.map((r) => (r.name === 'noout' ? { ...r, phase: 'Succeeded' as const } : r));
    const asked = decide(later(first, { ...status, hooks: done ?? [] }, 10));
    assert.equal(asked.status.approval?.pending?.hook, ref(h));
    const d = decide(
      later(first, asked.status, 30, answered('Refuse', 'bob', ref(h), 'not during the close')),
    );
    assert.equal(d.status.phase, 'Denied');
    assert.match(d.status.message ?? '', /refused by bob: not during the close/);
    assert.equal(d.status.approval?.decisions?.[0]?.decision, 'Refused');
    assert.equal(d.status.approval.pending, undefined);
    assert.ok(d.effects.some((e) => e.type === 'event' && e.reason === 'ApprovalRefused'));
    assert.equal(d.status.undo?.runs?.[0]?.name, 'noout', 'the noout hook that ran is undone');
  });

  it('never takes the requester’s own approval unless allowed, nor an answer for another hook', () => {
    const h = approvalHook('storage');
    const { first, status } = waiting([h]);
    const own = decide(later(first, status, 30, answered('Approve', 'alice', ref(h))));
    assert.equal(own.status.phase, 'RunningPreHooks');
    assert.match(own.status.message ?? '', /alice requested this action and may not approve it/);
    const stale = decide(
      later(first, status, 30, answered('Approve', 'bob', 'PreRebootJob/rook-ceph/other')),
    );
    assert.equal(stale.status.phase, 'RunningPreHooks');
    const allowed = approvalHook('self-ok', { allowSelfApproval: true });
    const w = waiting([allowed]);
    assert.equal(
      decide(later(w.first, w.status, 30, answered('Approve', 'alice', ref(allowed)))).status.phase,
      'Approved',
    );
  });

  it('fails the action when nobody answers within its timeout, and stretches the stage deadline to wait for it', () => {
    const h = approvalHook('storage', {}, '3h');
    const { first, status } = waiting([h]);
    // Past the pre-hooks' own 1h deadline, within the approval's 3h: still waiting.
    assert.equal(decide(later(first, status, 2 * 3600)).status.phase, 'RunningPreHooks');
    const d = decide(later(first, status, 3 * 3600 + 1));
    assert.equal(d.status.phase, 'Failed');
    assert.match(d.status.message ?? '', /timed out after 3h without an approval/);
  });

  it('reads only whole answers from the annotations', () => {
    assert.equal(approvalAnswer(action({}, {}, answered('Maybe', 'bob', 'x'))), undefined);
    assert.equal(approvalAnswer(action({}, {}, answered('Approve', 'bob', 'x', '  '))), undefined);
    assert.deepEqual(approvalAnswer(action({}, {}, answered('Refuse', 'bob', 'x'))), {
      decision: 'Refuse',
      by: 'bob',
      reason: 'CHG-1234 approved',
      for: 'x',
    });
  });
});

describe('the HTTP API’s approval rules', () => {
  const pending = { hook: 'PreRebootJob/a/b', allowSelfApproval: false, since: T0.toISOString() };
  const at = (status: NodeActionStatus) => ({ ...action({}, status), metadata: { ...action().metadata } });

  it('answer only what waits, by a named approver, never the requester’s own approval', () => {
    const bob = { username: 'bob', groups: ['storage'] };
    assert.equal(approvalRefusal(at({ phase: 'RunningPreHooks' }), bob, 'Approve')?.status, 409);
    assert.equal(
      approvalRefusal(at({ phase: 'Succeeded', approval: { pending } }), bob, 'Approve')?.status,
      409,
    );
    assert.equal(
      approvalRefusal(at({ phase: 'RunningPreHooks', approval: { pending } }), bob, 'Approve'),
      undefined,
    );
    const alice = { username: 'alice', groups: [] };
    assert.equal(
      approvalRefusal(at({ phase: 'RunningPreHooks', approval: { pending } }), alice, 'Approve')?.status,
      403,
    );
    assert.equal(
      approvalRefusal(at({ phase: 'RunningPreHooks', approval: { pending } }), alice, 'Refuse'),
      undefined,
    );
    const named = { ...pending, groups: ['dba'], users: ['carol'] };
    assert.equal(
      approvalRefusal(at({ phase: 'RunningPreHooks', approval: { pending: named } }), bob, 'Approve')?.status,
      403,
    );
    const carol = { username: 'carol', groups: [] };
    assert.equal(
      approvalRefusal(at({ phase: 'RunningPreHooks', approval: { pending: named } }), carol, 'Approve'),
      undefined,
    );
    const dba = { username: 'dan', groups: ['dba'] };
    assert.equal(
      approvalRefusal(at({ phase: 'RunningPreHooks', approval: { pending: named } }), dba, 'Approve'),
      undefined,
    );
  });
});
