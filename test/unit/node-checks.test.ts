// Node-scoped checks without the API server: variable replacement, the bounded per-node
// summary, and the runner's per-node evaluation and periodic rounds (probe functions
// written here; probes against real targets are in test/integration/checks-node-scoped).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import type { ClusterHealthCheckSpec } from '../../src/api/cluster-health-check.ts';
import { describeNodes, summarizeNodes } from '../../src/checks/node-results.ts';
import { escapeForUrl, nodeTarget, replaceNodeVariables } from '../../src/checks/node-target.ts';
import { CheckRunner, type ObservedCheck, type ProbeFunction } from '../../src/checks/runner.ts';
import { unknownState, type CheckState } from '../../src/checks/state.ts';
import type { KubeObject } from '../../src/kube/informer.ts';
import { matchesSelector } from '../../src/kube/labels.ts';
import { RestClient } from '../../src/kube/rest.ts';
import { silentLogger } from '../../src/log.ts';
import { dashboardView } from '../../src/http/dashboard-view.ts';
import { sleep, waitFor } from '../../src/wait.ts';

const kc = new KubeConfig();
kc.loadFromOptions({
  clusters: [{ name: 'none', server: 'https://127.0.0.1:1' }],
  users: [{ name: 'none' }],
  contexts: [{ name: 'none', cluster: 'none', user: 'none' }],
  currentContext: 'none',
});

const node = (name: string, ip?: string, labels: Record<string, string> = {}): KubeObject =>
  ({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, labels },
    status: { addresses: ip ? [{ type: 'InternalIP', address: ip }] : [] },
  }) as KubeObject;

describe('node variables', () => {
  const target = nodeTarget(node('worker 2/a', '10.0.0.7'));

  it('replaces $(NODE_NAME) and $(NODE_IP), escaped as asked', () => {
    assert.equal(
      replaceNodeVariables('http://$(NODE_IP):9100/n/$(NODE_NAME)', target, 'url', escapeForUrl),
      'http://10.0.0.7:9100/n/worker%202%2Fa',
    );
    assert.equal(replaceNodeVariables('$(NODE_NAME)', target, 'header'), 'worker 2/a');
    assert.equal(escapeForUrl('fd00::1'), 'fd00::1');
  });

  it('refuses what it cannot fill in, naming the field', () => {
    assert.throws(
      () => replaceNodeVariables('$(NODE_ZONE)', target, 'httpGet.url'),
      /httpGet\.url: unknown variable \$\(NODE_ZONE\)/,
    );
    assert.throws(
      () => replaceNodeVariables('/$(NODE_NAME)', undefined, 'httpGet.path'),
      /only for a Node-scoped check/,
    );
    assert.throws(
      () => replaceNodeVariables('$(NODE_IP)', nodeTarget(node('bare')), 'httpGet.url'),
      /node bare reports no InternalIP or ExternalIP address/,
    );
    assert.equal(replaceNodeVariables('no variables', undefined, 'x'), 'no variables');
  });
});

describe('the per-node summary', () => {
  it('counts every node and names the first 20 unsafe ones, by name', () => {
    const states = new Map<string, CheckState>();
    for (let i = 0; i < 30; i++) {
      const healthy = i % 3 !== 0 ? true : false;
      states.set(`n-${String(i).padStart(2, '0')}`, {
        ...unknownState(),
        healthy,
        message: healthy ? 'fine' : `${String(i)} PGs would become inactive`,
      });
    }
    states.set('never', unknownState());
    const results = summarizeNodes(states);
    assert.equal(results.evaluated, 30);
    assert.equal(results.unsafe, 10);
    assert.equal(results.safe, 20);
    assert.equal(results.unsafeNodes.length, 10);
    assert.equal(results.unsafeNodes[0]?.name, 'n-00');
    assert.match(describeNodes(results), /^20 of 30 evaluated nodes safe; n-00: 0 PGs .*; and 7 more$/);

    const many = new Map(
      [...Array(50).keys()].map((i) => [`m-${String(i)}`, { ...unknownState(), healthy: false }]),
    );
    assert.equal(summarizeNodes(many).unsafeNodes.length, 20);
  });
});

function runner(probe: ProbeFunction, nodes: KubeObject[], busy: Set<string>): CheckRunner {
  return new CheckRunner({
    rest: new RestClient(kc),
    probe,
    log: silentLogger(),
    serviceResolution: 'dns',
    mayWrite: () => false,
    nodes: {
      get: (name) => nodes.find((n) => n.metadata.name === name),
      select: (selector) => nodes.filter((n) => matchesSelector(selector, n.metadata.labels)),
      busy: () => busy,
    },
  });
}

function nodeCheck(name: string, spec: Partial<ClusterHealthCheckSpec>): ObservedCheck {
  return {
    apiVersion: 'talos.dev/v1alpha1',
    kind: 'ClusterHealthCheck',
    metadata: { name, generation: 1 },
    spec: {
      scope: 'Node',
      interval: '100ms',
      nodeInterval: '10s',
      timeout: '1s',
      failureThreshold: 1,
      httpGet: { url: 'http://agent/$(NODE_NAME)' },
      ...spec,
    },
  };
}

describe('CheckRunner with Node-scoped checks', () => {
  it('evaluates each selected node once, then only busy nodes until nodeInterval', async () => {
    const probed: string[] = [];
    const nodes = [
      node('a', '10.0.0.1', { pool: 'x' }),
      node('b', '10.0.0.2', { pool: 'x' }),
      node('c', '10.0.0.3'),
    ];
    const busy = new Set<string>();
    const r = runner(
      (_, context) => {
        const name = context.node?.name ?? '(none)';
        probed.push(name);
        return Promise.resolve({
          healthy: name !== 'b',
          message: name === 'b' ? 'primary pg-1 here' : 'no primary',
        });
      },
      nodes,
      busy,
    );
    try {
      r.upsert(nodeCheck('no-primary', { nodeSelector: { matchLabels: { pool: 'x' } } }));
      await waitFor('both selected nodes evaluated', () =>
        r.view('no-primary')?.nodes?.evaluated === 2 ? true : undefined,
      );
      const view = r.view('no-primary');
      assert.equal(view?.state.healthy, undefined, 'no verdict of its own');
      assert.deepEqual(
        view?.nodes?.unsafeNodes.map((n) => [n.name, n.message]),
        [['b', 'primary pg-1 here']],
      );
      assert.equal(view.nodeState?.('a')?.healthy, true);
      assert.deepEqual([...probed].sort(), ['a', 'b'], 'c is not selected');

      // Idle nodes wait for nodeInterval; a busy one is evaluated every interval.
      probed.length = 0;
      busy.add('a');
      await sleep(450);
      assert.ok(probed.length >= 2 && probed.filter((n) => n !== 'a').length === 0, probed.join(' '));

      // The gate's fresh evaluation is for the action's node.
      probed.length = 0;
      const fresh = await r.evaluateNow(['no-primary'], 'b');
      assert.equal(fresh.get('no-primary')?.healthy, false);
      assert.equal(fresh.get('no-primary')?.message, 'primary pg-1 here');
      assert.ok(probed.includes('b'));
      // A node the controller does not know is unhealthy, not skipped.
      const unknown = await r.evaluateNow(['no-primary'], 'ghost');
      assert.equal(unknown.get('no-primary')?.healthy, false);
      assert.match(unknown.get('no-primary')?.message ?? '', /node ghost is not among the Nodes/);
    } finally {
      r.stop();
    }
  });
});

describe('dashboard view of a Node-scoped check', () => {
  it('carries the per-node results the page lists as "node: check: message"', () => {
    const results = summarizeNodes(
      new Map([
        ['worker-1', { ...unknownState(), healthy: true, message: 'ok' }],
        ['worker-2', { ...unknownState(), healthy: false, message: '2 PGs would become inactive' }],
      ]),
    );
    const v = dashboardView({
      now: new Date(0),
      policies: [],
      nodes: [],
      actions: [],
      checks: [
        {
          name: 'ok-to-stop',
          generation: 1,
          state: unknownState(),
          spec: { scope: 'Node', httpGet: { url: 'http://agent/$(NODE_NAME)' } },
          scope: 'Node',
          nodes: results,
        },
        { name: 'cluster', generation: 1, state: unknownState(), spec: { nodes: {} } },
      ],
    });
    assert.deepEqual(v.checks[0]?.nodeResults, {
      evaluated: 2,
      safe: 1,
      unsafe: 1,
      unsafeNodes: [{ name: 'worker-2', message: '2 PGs would become inactive' }],
    });
    assert.equal(v.checks[1]?.nodeResults, undefined);
  });
});
