// kured's Prometheus alert gate, fed by gatehouse: the chart's GatehouseRebootHeld alert,
// in a real Prometheus scraping a real controller, fires while a check that gates Reboot
// is unhealthy and clears once it is healthy; a check gating only Upgrade does not hold
// reboots; and it fires when gatehouse cannot be scraped at all. kured itself is not
// run: what it does with the alerts (query ALERTS, keep those --alert-filter-regexp
// selects with --alert-filter-match-only) is done here with the same query.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { INSTANCE_LABEL } from '../../src/api/names.ts';
import type { Controller } from '../../src/controller.ts';
import type { Monitoring, RuleGroup } from '../../sandbox/monitoring.ts';
import { startGateController } from '../support/gate.ts';
import { renderChart } from '../support/helm.ts';
import { installGatehouseAPI } from '../support/install.ts';
import { switchableCheck, testKubeConfig, uniqueName, waitFor } from '../support/kube.ts';
import { startTestMonitoring } from '../support/monitoring.ts';

const kc = testKubeConfig();
const instance = uniqueName('kured');
let monitoring: Monitoring | undefined;
let controller: Controller | undefined;

before(async () => {
  await installGatehouseAPI(kc);
  monitoring = await startTestMonitoring();
  controller = await startGateController(instance, { actions: false });
});

after(async () => {
  await controller?.stop();
  await monitoring?.stop();
});

type Series = { metric: Record<string, string> };

/** What kured's gate sees with --alert-filter-regexp=^GatehouseRebootHeld$ --alert-filter-match-only. */
async function kuredBlockingAlerts(m: Monitoring): Promise<Series[]> {
  const data = (await m.prometheusApi(`/api/v1/query?query=${encodeURIComponent('ALERTS')}`)) as {
    result: Series[];
  };
  return data.result.filter((s) => /^GatehouseRebootHeld$/.test(s.metric.alertname ?? ''));
}

describe('kured gated by gatehouse', () => {
  it('GatehouseRebootHeld fires while a check gating Reboot is unhealthy, clears when healthy, and fires unscraped', async (t) => {
    assert.ok(monitoring && controller);
    const m = monitoring;
    const rendered = await renderChart('prometheusRule.enabled=true');
    const rule = rendered.find((o) => o.kind === 'PrometheusRule') as unknown as {
      spec: { groups: RuleGroup[] };
    };
    const groups = rule.spec.groups.map((g) => ({
      ...g,
      rules: g.rules.filter((r) => (r as { alert?: string }).alert === 'GatehouseRebootHeld'),
    }));
    await m.setTargets('gatehouse', [new URL(controller.url).host]);
    const loaded = await m.setRules('kured', groups);
    assert.deepEqual(
      loaded.map((r) => [r.name, r.health]),
      [['GatehouseRebootHeld', 'ok']],
    );
    const labels = { [INSTANCE_LABEL]: instance };
    const reboot = await switchableCheck(t, kc, uniqueName('kured-reboot'), false, labels, ['Reboot']);
    const upgrade = await switchableCheck(t, kc, uniqueName('kured-upgrade'), false, labels, ['Upgrade']);

    const held = await waitFor(
      'kured to see GatehouseRebootHeld firing for the Reboot check',
      async (observe) => {
        const alerts = await kuredBlockingAlerts(m);
        observe(JSON.stringify(alerts.map((a) => a.metric)));
        return alerts.some((a) => a.metric.check === reboot.name && a.metric.alertstate === 'firing')
          ? alerts
          : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    assert.deepEqual(
      held.map((a) => a.metric.check),
      [reboot.name],
      `the check gating only Upgrade (${upgrade.name}) holds no reboot`,
    );

    await reboot.set(true);
    await waitFor(
      'GatehouseRebootHeld to clear once the check is healthy',
      async (observe) => {
        const alerts = await kuredBlockingAlerts(m);
        observe(JSON.stringify(alerts.map((a) => a.metric)));
        return alerts.length === 0 ? true : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );

    // No word from gatehouse is no gate: unscraped, reboots are held.
    await m.setTargets('gatehouse', ['127.0.0.1:1']);
    await waitFor(
      'GatehouseRebootHeld to fire while gatehouse is not scraped',
      async (observe) => {
        const alerts = await kuredBlockingAlerts(m);
        observe(JSON.stringify(alerts.map((a) => a.metric)));
        return alerts.some((a) => a.metric.alertstate === 'firing' && a.metric.check === undefined)
          ? true
          : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
  });
});
