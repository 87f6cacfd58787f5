// The kwok configuration is data the sandbox depends on: check its shape here, where a
// mistake is cheap to find, rather than as a sandbox that never gets Ready.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import {
  kwokConfiguration,
  NODE_POWER_ANNOTATION,
  NODE_POWER_OFF,
  POD_OUTCOME_ANNOTATION,
  stages,
} from '../../sandbox/kwok-config.ts';

interface NodeSelector {
  matchExpressions: { key: string; operator: string; values: string[] }[];
}

interface SampleNode {
  ready?: 'True' | 'False' | 'Unknown';
  powerOff?: boolean;
  phase?: string;
}

/**
 * The node stages whose selector matches a node, evaluating the few selector keys the
 * configuration uses the way kwok does (NotIn also matches a missing value).
 */
function matchingNodeStages(node: SampleNode): string[] {
  const valueOf = (key: string): string | undefined => {
    if (key === '.status.conditions.[] | select( .type == "Ready" ) | .status') return node.ready;
    if (key === `.metadata.annotations["${NODE_POWER_ANNOTATION}"]`)
      return node.powerOff ? NODE_POWER_OFF : undefined;
    if (key === '.status.phase') return node.phase;
    throw new Error(`a node stage selects on ${key}, which this test does not know`);
  };
  return stages
    .filter((s) => s.spec.resourceRef.kind === 'Node')
    .filter((s) => {
      const { matchExpressions } = (s.spec as typeof s.spec & { selector: NodeSelector }).selector;
      return matchExpressions.every(({ key, operator, values }) => {
        const value = valueOf(key);
        return operator === 'In'
          ? value !== undefined && values.includes(value)
          : value === undefined || !values.includes(value);
      });
    })
    .map((s) => s.metadata.name);
}

describe('kwok configuration', () => {
  const docs = parseAllDocuments(kwokConfiguration({ serverAddress: '127.0.0.1:1234' })).map(
    (d) => d.toJS() as { kind: string; metadata: { name: string }; options?: Record<string, unknown> },
  );

  it('is one KwokConfiguration followed by the stages', () => {
    assert.equal(docs[0]?.kind, 'KwokConfiguration');
    assert.equal(docs[0].options?.serverAddress, '127.0.0.1:1234');
    assert.equal(docs[0].options.manageAllNodes, false);
    assert.deepEqual(
      docs.slice(1).map((d) => d.kind),
      stages.map(() => 'Stage'),
    );
  });

  it('sets every parallelism kwok needs when configured from a file', () => {
    for (const key of ['nodeLeaseParallelism', 'podPlayStageParallelism', 'nodePlayStageParallelism']) {
      assert.ok(Number(docs[0]?.options?.[key]) > 0, key);
    }
  });

  it('has uniquely named stages for nodes and pods', () => {
    const names = stages.map((s) => s.metadata.name);
    assert.equal(new Set(names).size, names.length);
    assert.ok(stages.some((s) => s.spec.resourceRef.kind === 'Node'));
    assert.ok(stages.some((s) => s.spec.resourceRef.kind === 'Pod'));
  });

  it('sends a Job pod to exactly one terminal stage, as its outcome annotation says', () => {
    const selectorOf = (name: string) => JSON.stringify(stages.find((s) => s.metadata.name === name)?.spec);
    assert.match(
      selectorOf('pod-complete'),
      new RegExp(`${POD_OUTCOME_ANNOTATION}.*"NotIn".*\\["Failed","Hang"\\]`),
    );
    assert.match(selectorOf('pod-fail'), new RegExp(`${POD_OUTCOME_ANNOTATION}.*"In".*\\["Failed"\\]`));
  });

  it('turns a new or recovered node Ready, unless it is powered off', () => {
    assert.deepEqual(matchingNodeStages({}), ['node-initialize']);
    assert.deepEqual(matchingNodeStages({ ready: 'Unknown', phase: 'Running' }), ['node-initialize']);
    // A Ready node is left as it is: nothing rewrites its status behind the simulator's back.
    assert.deepEqual(matchingNodeStages({ ready: 'True', phase: 'Running' }), []);
  });

  it('keeps a powered-off node NotReady: no stage makes it Ready, and going silent does not loop', () => {
    assert.deepEqual(matchingNodeStages({ ready: 'True', phase: 'Running', powerOff: true }), [
      'node-power-off',
    ]);
    assert.deepEqual(matchingNodeStages({ powerOff: true }), ['node-power-off']);
    // What node-power-off leaves behind matches nothing, so the node stays down.
    assert.deepEqual(matchingNodeStages({ ready: 'Unknown', phase: 'Running', powerOff: true }), []);
    const template = JSON.stringify(stages.find((s) => s.metadata.name === 'node-power-off')?.spec);
    assert.match(template, /status: \\"Unknown\\"/);
  });
});
