// The chart's PrometheusRule, as helm renders it, in a real Prometheus: promtool accepts
// the rules, Prometheus loads every one of them healthy, and with the controller scraped
// an unhealthy check fires GatehouseCheckUnhealthy, which reaches Alertmanager; the
// controller's own alerts stay quiet while it is ready and leads.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import type { Controller } from '../../src/controller.ts';
import { ensureTool } from '../../sandbox/binaries.ts';
import type { Monitoring, RuleGroup } from '../../sandbox/monitoring.ts';
import { startGateController } from '../support/gate.ts';
import { renderChart } from '../support/helm.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { rest, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';
import { startTestMonitoring } from '../support/monitoring.ts';
import { stopAll } from '../support/teardown.ts';

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('chart-alerts');
const check = uniqueName('unreachable');
let monitoring: Monitoring | undefined;
let controller: Controller | undefined;

/** The rule groups of the chart's PrometheusRule, rendered with `set`. */
async function chartRules(...set: string[]): Promise<RuleGroup[]> {
  const objects = await renderChart('prometheusRule.enabled=true', ...set);
  const rule = objects.find((o) => o.kind === 'PrometheusRule') as unknown as {
    spec: { groups: RuleGroup[] };
  };
  return rule.spec.groups;
}

before(async () => {
  await installGatehouseAPI(kc);
  monitoring = await startTestMonitoring();
  controller = await startGateController(instance, { actions: false });
});

after(async () => {
  await client
    .request(`/apis/talos.dev/v1alpha1/clusterhealthchecks/${check}`, { method: 'DELETE' })
    .catch(() => undefined);
  await stopAll(controller, monitoring);
});

describe("the chart's alert rules", () => {
  it('pass promtool check rules', async () => {
    const file = join(monitoring?.dir ?? '', 'chart-rules.yml');
    await writeFile(file, stringify({ groups: await chartRules() }));
    const { stdout } = await promisify(execFile)(await ensureTool('promtool'), ['check', 'rules', file]);
    assert.match(stdout, /SUCCESS: 7 rules found/);
  });

  it('load healthy into Prometheus, and an unhealthy check fires an alert Alertmanager receives', async () => {
    assert.ok(monitoring && controller);
    const m = monitoring;
    // The ServiceMonitor's job is the Service's name, gatehouse: the rules select it.
    await m.setTargets('gatehouse', [new URL(controller.url).host]);
    const loaded = await m.setRules('chart', await chartRules('prometheusRule.checkUnhealthyFor=2s'));
    assert.deepEqual(
      loaded.map((r) => [r.name, r.health]),
      [
        ['GatehouseCheckUnhealthy', 'ok'],
        ['GatehouseRebootHeld', 'ok'],
        ['GatehouseActionStuck', 'ok'],
        ['GatehouseHookFailed', 'ok'],
        ['GatehouseNotReady', 'ok'],
        ['GatehouseUnplannedDisruption', 'ok'],
        ['GatehouseLeaderless', 'ok'],
      ],
    );
    // A check whose target refuses connections: unhealthy from its first probe.
    await client.request('/apis/talos.dev/v1alpha1/clusterhealthchecks', {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'ClusterHealthCheck',
        metadata: { name: check, labels: { [INSTANCE_LABEL]: instance } },
        spec: {
          interval: '1s',
          timeout: '1s',
          failureThreshold: 1,
          tcpSocket: { host: '127.0.0.1', port: 1 },
        },
      },
    });
    type Alert = { labels: Record<string, string>; state: string };
    const firing = await waitFor(
      'GatehouseCheckUnhealthy to fire for the check',
      async (observe) => {
        const { alerts } = (await m.prometheusApi('/api/v1/alerts')) as { alerts: Alert[] };
        observe(JSON.stringify(alerts.map((a) => [a.labels.alertname, a.labels.check, a.state])));
        return alerts.find(
          (a) =>
            a.labels.alertname === 'GatehouseCheckUnhealthy' &&
            a.labels.check === check &&
            a.state === 'firing',
        );
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    assert.equal(firing.labels.severity, 'warning');
    await waitFor(
      'Alertmanager to receive GatehouseCheckUnhealthy',
      async (observe) => {
        const received = await m.receivedAlerts();
        observe(JSON.stringify(received.map((a) => [a.labels.alertname, a.status.state])));
        return received.some(
          (a) => a.labels.alertname === 'GatehouseCheckUnhealthy' && a.labels.check === check,
        )
          ? true
          : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
    // The controller is scraped, ready and leads: its own alerts are not even pending.
    const { alerts } = (await m.prometheusApi('/api/v1/alerts')) as { alerts: Alert[] };
    assert.deepEqual(
      alerts.filter((a) => ['GatehouseNotReady', 'GatehouseLeaderless'].includes(a.labels.alertname ?? '')),
      [],
    );
  });
});
