// The controller-state gauges (src/metrics.ts): read from the controller at each scrape,
// so what they report is what the caches hold now, never a leftover of an earlier scrape.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Metrics, type ControllerView } from '../../src/metrics.ts';

type Action = ReturnType<ControllerView['actions']>[number];

function action(name: string, status: Action['status']): Action {
  return { metadata: { name }, spec: { nodeName: `node-${name}` }, ...(status ? { status } : {}) };
}

describe('controller-state metrics', () => {
  it('report leadership, readiness, the phase each unfinished action entered and its failed hooks', async () => {
    const metrics = new Metrics({ defaultMetrics: false });
    let leader = false;
    let ready = false;
    let actions: Action[] = [
      action('a', {
        phase: 'RunningPreHooks',
        phaseTime: '2026-12-01T10:00:00Z',
        hooks: [{ phase: 'Failed' }, { phase: 'Running' }],
      }),
      action('b', {
        phase: 'Succeeded',
        phaseTime: '2026-12-01T09:00:00Z',
        completionTime: '2026-12-01T09:30:00Z',
      }),
      action('c', {}),
    ];
    metrics.watchController({ isLeader: () => leader, ready: () => ready, actions: () => actions });
    const scrape = async () => metrics.registry.metrics();

    let text = await scrape();
    assert.match(text, /^gatehouse_leader 0$/m);
    assert.match(text, /^gatehouse_ready 0$/m);
    assert.match(
      text,
      /^gatehouse_action_phase_start_timestamp_seconds\{action="a",node="node-a",phase="RunningPreHooks"\} 1796119200$/m,
    );
    assert.doesNotMatch(
      text,
      /gatehouse_action_phase_start_timestamp_seconds\{action="[bc]"/,
      'finished or unstarted: none',
    );
    assert.match(
      text,
      /^gatehouse_action_hook_failures\{action="a",node="node-a",phase="RunningPreHooks"\} 1$/m,
    );

    leader = true;
    ready = true;
    actions = [
      action('a', {
        phase: 'Failed',
        phaseTime: '2026-12-01T10:05:00Z',
        completionTime: '2026-12-01T10:05:00Z',
        hooks: [{ phase: 'Failed' }, { phase: 'Failed' }],
      }),
    ];
    text = await scrape();
    assert.match(text, /^gatehouse_leader 1$/m);
    assert.match(text, /^gatehouse_ready 1$/m);
    assert.doesNotMatch(
      text,
      /^gatehouse_action_phase_start_timestamp_seconds\{/m,
      'the ended action no longer counts',
    );
    assert.match(text, /^gatehouse_action_hook_failures\{action="a",node="node-a",phase="Failed"\} 2$/m);
    actions = [];
    assert.doesNotMatch(
      await scrape(),
      /^gatehouse_action_hook_failures\{/m,
      'a deleted action leaves nothing behind',
    );
  });
});
