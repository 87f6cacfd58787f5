// The unplanned-disruption audit's core (src/boots/audit.ts): what went around the gate.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { auditNode, type AuditInput } from '../../src/boots/audit.ts';

const now = new Date('2026-12-03T10:00:00Z');
const base: AuditInput = {
  now,
  node: { name: 'w1', bootID: 'b2', osImage: 'Talos (v1.13.0)', ready: true },
  record: { bootID: 'b1', osImage: 'Talos (v1.13.0)' },
  actions: [],
  notReadyAfterMs: 60_000,
};
const kinds = (input: Partial<AuditInput>) => auditNode({ ...base, ...input }).disruptions.map((d) => d.kind);

describe('the unplanned-disruption audit', () => {
  it('records a node seen for the first time, and reports nothing', () => {
    const d = auditNode({ ...base, record: undefined });
    assert.deepEqual(d.disruptions, []);
    assert.deepEqual(d.record, { bootID: 'b2', osImage: 'Talos (v1.13.0)' });
  });

  it('a node first seen NotReady: the spell under way began before the audit watched, and is never reported', () => {
    const since = new Date(now.getTime() - 3_600_000).toISOString();
    const node = { ...base.node, ready: false, notReadySince: since };
    const first = auditNode({ ...base, node, record: undefined });
    assert.deepEqual(first.disruptions, []);
    assert.equal(first.record?.notReadyReported, since);
    assert.deepEqual(
      auditNode({ ...base, node, record: first.record }).disruptions,
      [],
      'nor on the next look',
    );
    const later = new Date(now.getTime() - 600_000).toISOString();
    assert.deepEqual(
      kinds({ node: { ...node, notReadySince: later }, record: first.record }),
      ['not-ready'],
      'a later spell is reported',
    );
  });

  it('reports a boot with no action in flight, once', () => {
    const d = auditNode(base);
    assert.deepEqual(
      d.disruptions.map((x) => [x.kind, x.event.reason]),
      [['boot', 'UnplannedDisruption']],
    );
    assert.match(d.disruptions[0]?.event.message ?? '', /b1 → b2/);
    assert.ok(d.record);
    assert.deepEqual(
      auditNode({ ...base, record: d.record }).disruptions,
      [],
      'the next look reports nothing',
    );
  });

  it('a boot an action caused, or one during an approved action, is planned', () => {
    assert.deepEqual(
      kinds({ actions: [{ name: 'a', action: 'Reboot', phase: 'Succeeded', bootIDAfter: 'b2' }] }),
      [],
    );
    assert.deepEqual(kinds({ actions: [{ name: 'a', action: 'Reboot', phase: 'WaitingForNode' }] }), []);
    assert.deepEqual(
      kinds({ actions: [{ name: 'a', action: 'Reboot', phase: 'WaitingForHealth' }] }),
      ['boot'],
      'not yet approved: unplanned',
    );
    assert.deepEqual(
      kinds({ actions: [{ name: 'a', action: 'Reboot', phase: 'Succeeded', bootIDAfter: 'b1' }] }),
      ['boot'],
      'an earlier boot',
    );
  });

  it('a version nobody asked for: none, another version than the Upgrade asked (Talos fell back)', () => {
    const node = { ...base.node, osImage: 'Talos (v1.13.2)' };
    const upgrade = (image: string) => [
      { name: 'u', action: 'Upgrade' as const, phase: 'WaitingForNode' as const, image },
    ];
    assert.deepEqual(kinds({ node, actions: upgrade('ghcr.io/siderolabs/installer:v1.13.2') }), []);
    assert.deepEqual(kinds({ node, actions: upgrade('ghcr.io/siderolabs/installer:v1.13.3') }), [
      'version-change',
    ]);
    assert.deepEqual(kinds({ node }), ['boot', 'version-change']);
    assert.deepEqual(kinds({ node, actions: [{ name: 'r', action: 'Reboot', phase: 'WaitingForNode' }] }), [
      'version-change',
    ]);
  });

  it('a long NotReady without an action: once per spell, after the threshold', () => {
    const record = { bootID: 'b2', osImage: 'Talos (v1.13.0)' };
    const soon = auditNode({
      ...base,
      record,
      node: { ...base.node, ready: false, notReadySince: '2026-12-03T09:59:30Z' },
    });
    assert.deepEqual(soon.disruptions, []);
    assert.equal(soon.requeueAfterMs, 30_100);
    const late = auditNode({
      ...base,
      record,
      node: { ...base.node, ready: false, notReadySince: '2026-12-03T09:58:00Z' },
    });
    assert.deepEqual(
      late.disruptions.map((x) => x.kind),
      ['not-ready'],
    );
    assert.ok(late.record);
    assert.deepEqual(
      auditNode({
        ...base,
        record: late.record,
        node: { ...base.node, ready: false, notReadySince: '2026-12-03T09:58:00Z' },
      }).disruptions,
      [],
    );
    assert.deepEqual(
      auditNode({
        ...base,
        record,
        node: { ...base.node, ready: false, notReadySince: '2026-12-03T09:58:00Z' },
        actions: [{ name: 's', action: 'Shutdown', phase: 'WaitingForNode' }],
      }).disruptions,
      [],
      'a shutdown gatehouse approved',
    );
  });
});

describe("the audit's mark on the dashboard", () => {
  it("the node table shows the node's last unplanned disruption", async () => {
    const { nodeView } = await import('../../src/http/node-view.ts');
    const { AUDIT_ANNOTATION } = await import('../../src/boots/audit.ts');
    const at = '2026-12-03T10:00:00.000Z';
    const view = nodeView('w1', {
      metadata: {
        name: 'w1',
        annotations: {
          [AUDIT_ANNOTATION]: JSON.stringify({ bootID: 'b2', osImage: '', last: { kind: 'boot', at } }),
        },
      },
    });
    assert.deepEqual(view.unplanned, { kind: 'boot', at });
    assert.equal(nodeView('w1', { metadata: { name: 'w1' } }).unplanned, undefined);
  });
});
