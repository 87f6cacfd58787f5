// The kwok configuration is data the sandbox depends on: check its shape here, where a
// mistake is cheap to find, rather than as a sandbox that never gets Ready.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { kwokConfiguration, POD_OUTCOME_ANNOTATION, stages } from '../../sandbox/kwok-config.ts';

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
});
