// What a Node says about its boots (src/boots/record.ts) and how a change is written to
// it (src/boots/node.ts).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BOOT_ANNOUNCEMENT_ANNOTATION, BOOT_RECORD_ANNOTATION } from '../../src/api/names.ts';
import { nodePatch } from '../../src/boots/node.ts';
import {
  bootOutcome,
  readBootAnnotations,
  stageDone,
  withPrereadyTaint,
  type BootNodeObject,
} from '../../src/boots/record.ts';
import { hook } from './action-fixtures.ts';
import { announcement, doneRecord, stage } from './boots-fixtures.ts';

const prep = hook('NodePrereadyJob', 'prep');
const unset = hook('NodeReadyJob', 'unset');

function nodeWith(annotations: Record<string, string>, taints: { key: string; effect: string }[] = []) {
  const node: BootNodeObject = {
    metadata: { name: 'w1', uid: 'u', resourceVersion: '42', annotations },
    spec: { taints },
  };
  return node;
}

describe('reading a node', () => {
  it('reads the record, the announcement and the taint', () => {
    const record = doneRecord('boot-1', [prep], [unset]);
    const seen = readBootAnnotations(
      nodeWith(
        {
          [BOOT_RECORD_ANNOTATION]: JSON.stringify(record),
          [BOOT_ANNOUNCEMENT_ANNOTATION]: JSON.stringify(announcement('boot-1')),
        },
        [{ key: 'talos.dev/preready', effect: 'NoSchedule' }],
      ),
    );
    assert.deepEqual(seen.record, record);
    assert.equal(seen.announcement?.action.name, 'reboot-w1');
    assert.equal(seen.prereadyTaint, true);
    assert.deepEqual(seen.invalid, []);
  });

  it('treats what is not JSON, or not a record, as absent, and says so', () => {
    for (const bad of [
      '{',
      '"done"',
      JSON.stringify({ bootID: 'boot-1', preready: { phase: 'Succeeded' } }),
    ]) {
      const seen = readBootAnnotations(
        nodeWith({ [BOOT_RECORD_ANNOTATION]: bad, [BOOT_ANNOUNCEMENT_ANNOTATION]: bad }),
      );
      assert.equal(seen.record, undefined, bad);
      assert.equal(seen.announcement, undefined, bad);
      assert.deepEqual(seen.invalid, [BOOT_RECORD_ANNOTATION, BOOT_ANNOUNCEMENT_ANNOTATION]);
    }
    const forged = {
      ...doneRecord('boot-1', [prep], []),
      preready: { ...stage([prep], 'Succeeded'), phase: 'Done' },
    };
    assert.equal(
      readBootAnnotations(nodeWith({ [BOOT_RECORD_ANNOTATION]: JSON.stringify(forged) })).record,
      undefined,
    );
  });

  it('adds and removes the preready taint, leaving the others', () => {
    const others = [{ key: 'node-role.kubernetes.io/control-plane', effect: 'NoSchedule' }];
    const on = withPrereadyTaint(others, true);
    assert.deepEqual(on, [...others, { key: 'talos.dev/preready', effect: 'NoSchedule' }]);
    assert.deepEqual(withPrereadyTaint(on, true), on, 'once');
    assert.deepEqual(
      withPrereadyTaint([...on, { key: 'talos.dev/preready', effect: 'NoExecute' }], false),
      others,
    );
  });
});

describe('a stage is done only for the hooks it covers', () => {
  it('needs success and every current hook among those covered', () => {
    const late = hook('NodePrereadyJob', 'late');
    assert.equal(stageDone(stage([prep], 'Succeeded'), [prep]), true);
    assert.equal(stageDone(stage([prep], 'Succeeded'), []), true, 'a deleted hook does not matter');
    assert.equal(stageDone(stage([prep], 'Succeeded'), [prep, late]), false, 'a hook created since');
    assert.equal(stageDone(stage([prep], 'Running'), [prep]), false);
    assert.equal(stageDone(stage([prep], 'Failed'), [prep]), false);
    assert.equal(stageDone(undefined, []), false);
    const recreated = { ...prep, metadata: { ...prep.metadata, uid: 'new' } };
    assert.equal(stageDone(stage([prep], 'Succeeded'), [recreated]), false, 'same name, another object');
  });
});

describe('bootOutcome: what an action waits for', () => {
  it('is done at once when no boot hook selects the node', () => {
    assert.equal(bootOutcome(undefined, 'boot-2', [], []).state, 'Succeeded');
  });

  it('waits while there is no record of that boot (a record of another boot never counts)', () => {
    const o = bootOutcome(doneRecord('boot-1', [prep], [unset]), 'boot-2', [prep], [unset]);
    assert.equal(o.state, 'Waiting');
    assert.deepEqual(o.runs, []);
  });

  it('runs, fails or succeeds as the stages say, for the hooks selecting the node now', () => {
    const running = bootOutcome(
      { bootID: 'boot-2', preready: stage([prep], 'Running'), ready: stage([], 'Pending') },
      'boot-2',
      [prep],
      [unset],
    );
    assert.equal(running.state, 'Running');
    assert.match(running.message, /^NodePrereadyJobs: stage Running/);
    const failed = bootOutcome(
      { bootID: 'boot-2', preready: stage([prep], 'Succeeded'), ready: stage([unset], 'Failed') },
      'boot-2',
      [prep],
      [unset],
    );
    assert.equal(failed.state, 'Failed');
    assert.match(failed.message, /^NodeReadyJobs: stage Failed/);
    assert.deepEqual(
      failed.runs.map((r) => [r.name, r.phase]),
      [
        ['prep', 'Succeeded'],
        ['unset', 'Failed'],
      ],
    );
    const done = bootOutcome(doneRecord('boot-2', [prep], [unset]), 'boot-2', [prep], [unset]);
    assert.deepEqual([done.state, done.message], ['Succeeded', '2 boot hooks done']);
    const late = hook('NodeReadyJob', 'late');
    assert.equal(
      bootOutcome(doneRecord('boot-2', [prep], [unset]), 'boot-2', [prep], [unset, late]).state,
      'Running',
    );
  });
});

describe('writing to a node', () => {
  it('is one merge patch, conditional on the version decided upon', () => {
    const record = doneRecord('boot-1', [prep], []);
    const patch = nodePatch(nodeWith({}, [{ key: 'other', effect: 'NoExecute' }]), { record, taint: true });
    assert.deepEqual(patch, {
      metadata: { resourceVersion: '42', annotations: { [BOOT_RECORD_ANNOTATION]: JSON.stringify(record) } },
      spec: {
        taints: [
          { key: 'other', effect: 'NoExecute' },
          { key: 'talos.dev/preready', effect: 'NoSchedule' },
        ],
      },
    });
  });

  it('removes the taint list when the preready taint was the only one, and the announcement when there is one', () => {
    const node = nodeWith({ [BOOT_ANNOUNCEMENT_ANNOTATION]: '{}' }, [
      { key: 'talos.dev/preready', effect: 'NoSchedule' },
    ]);
    assert.deepEqual(nodePatch(node, { taint: false, removeAnnouncement: true }), {
      metadata: { resourceVersion: '42', annotations: { [BOOT_ANNOUNCEMENT_ANNOTATION]: null } },
      spec: { taints: null },
    });
  });

  it('writes nothing that would change nothing', () => {
    const record = doneRecord('boot-1', [prep], []);
    const node = nodeWith({ [BOOT_RECORD_ANNOTATION]: JSON.stringify(record) }, [
      { key: 'talos.dev/preready', effect: 'NoSchedule' },
    ]);
    assert.equal(nodePatch(node, { record, taint: true, removeAnnouncement: true }), undefined);
    assert.equal(nodePatch(node, {}), undefined);
  });
});
