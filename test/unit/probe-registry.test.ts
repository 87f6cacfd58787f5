// The probe registry (src/checks/probes/index.ts): one implementation per probe type of
// the schema, checked by the compiler — the @ts-expect-error lines below fail `npm run
// check` if a registry could lack a probe or hold one of the wrong type.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ClusterHealthCheckSpec, PROBES } from '../../src/api/cluster-health-check.ts';
import { probeTypeOf } from '../../src/checks/probe.ts';
import { PROBE_REGISTRY, type ProbeRegistry } from '../../src/checks/probes/index.ts';

describe('the probe registry', () => {
  it('has exactly the schema’s probe types, each a spec field of its own', () => {
    assert.deepEqual(Object.keys(PROBE_REGISTRY), [...PROBES]);
    for (const probe of PROBES) assert.ok(probe in ClusterHealthCheckSpec.properties, probe);
  });

  it('is a type that refuses a missing or mismatched implementation', () => {
    const { nodes: _nodes, ...withoutNodes } = PROBE_REGISTRY;
    // @ts-expect-error -- the nodes probe is missing
    const incomplete: ProbeRegistry = withoutNodes;
    // @ts-expect-error -- a tcpSocket probe cannot read an httpGet spec
    const mismatched: ProbeRegistry = { ...PROBE_REGISTRY, httpGet: PROBE_REGISTRY.tcpSocket };
    assert.equal(Object.keys(incomplete).length, PROBES.length - 1);
    assert.equal(mismatched.httpGet, PROBE_REGISTRY.tcpSocket);
  });

  it('names the probe a spec sets', () => {
    assert.equal(probeTypeOf({ tcpSocket: { host: 'db', port: 5432 } }), 'tcpSocket');
    assert.equal(probeTypeOf({}), 'none');
  });
});
