// The chart's GatehouseRebootHeld rule, evaluated by promtool's rule tests (Prometheus's
// own engine over series written here): it fires at once for each check that gates
// Reboot and is unhealthy or unknown, not for checks gating other actions only, clears
// when the check is healthy, and fires without a check label when gatehouse is not
// scraped. kured-gate.test.ts shows the same against a live Prometheus and controller.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { ensureTool } from '../../sandbox/binaries.ts';
import type { RuleGroup } from '../../sandbox/monitoring.ts';
import { renderChart } from '../support/helm.ts';

const run = promisify(execFile);

async function rebootHeldGroups(): Promise<RuleGroup[]> {
  const objects = await renderChart('prometheusRule.enabled=true');
  const rule = objects.find((o) => o.kind === 'PrometheusRule') as unknown as {
    spec: { groups: RuleGroup[] };
  };
  return rule.spec.groups.map((g) => ({
    ...g,
    rules: g.rules.filter((r) => (r as { alert?: string }).alert === 'GatehouseRebootHeld'),
  }));
}

const job = 'job="gatehouse", instance="10.0.0.9:8080"';

describe('GatehouseRebootHeld', () => {
  it('fires for unhealthy or unknown checks gating Reboot, clears when healthy, and fires unscraped', async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'kured-rule-'));
    t.after(() => rm(dir, { recursive: true, force: true }));
    await writeFile(join(dir, 'rules.yml'), stringify({ groups: await rebootHeldGroups() }));
    const description =
      'A check that gates Reboot is unhealthy or unknown (or gatehouse cannot be scraped): tools that gate on this alert, such as kured, hold their reboots until it clears.';
    const firing = (check: string) => ({
      exp_labels: { check, severity: 'info' },
      exp_annotations: {
        summary: `Reboots are held: ClusterHealthCheck ${check} is not healthy`,
        description,
      },
    });
    const unscraped = {
      exp_labels: { severity: 'info' },
      exp_annotations: { summary: 'Reboots are held: gatehouse is not scraped', description },
    };
    const tests = {
      rule_files: ['rules.yml'],
      evaluation_interval: '1m',
      tests: [
        {
          interval: '1m',
          input_series: [
            // ceph: gates Reboot; unhealthy for 3 minutes, then healthy.
            { series: `gatehouse_check_healthy{${job}, check="ceph"}`, values: '0 0 0 1 1' },
            { series: `gatehouse_check_gates{${job}, check="ceph", action="Reboot"}`, values: '1x4' },
            // fresh: gates Reboot and Upgrade; never probed (unknown) for a minute.
            { series: `gatehouse_check_healthy{${job}, check="fresh"}`, values: '-1 1 1 1 1' },
            { series: `gatehouse_check_gates{${job}, check="fresh", action="Reboot"}`, values: '1x4' },
            { series: `gatehouse_check_gates{${job}, check="fresh", action="Upgrade"}`, values: '1x4' },
            // image: gates only Upgrade, and is unhealthy throughout.
            { series: `gatehouse_check_healthy{${job}, check="image"}`, values: '0x4' },
            { series: `gatehouse_check_gates{${job}, check="image", action="Upgrade"}`, values: '1x4' },
            { series: `up{${job}}`, values: '1x4' },
          ],
          alert_rule_test: [
            {
              eval_time: '0m',
              alertname: 'GatehouseRebootHeld',
              exp_alerts: [firing('ceph'), firing('fresh')],
            },
            { eval_time: '2m', alertname: 'GatehouseRebootHeld', exp_alerts: [firing('ceph')] },
            { eval_time: '4m', alertname: 'GatehouseRebootHeld', exp_alerts: [] },
          ],
        },
        {
          interval: '1m',
          // gatehouse scraped, then its target gone down, then no series at all.
          input_series: [{ series: `up{${job}}`, values: '1 0 0' }],
          alert_rule_test: [
            { eval_time: '0m', alertname: 'GatehouseRebootHeld', exp_alerts: [] },
            {
              eval_time: '1m',
              alertname: 'GatehouseRebootHeld',
              exp_alerts: [unscraped],
            },
            {
              eval_time: '20m',
              alertname: 'GatehouseRebootHeld',
              exp_alerts: [unscraped],
            },
          ],
        },
      ],
    };
    await writeFile(join(dir, 'tests.yml'), stringify(tests));
    const promtool = await ensureTool('promtool');
    let result: { stdout: string; stderr: string };
    try {
      result = await run(promtool, ['test', 'rules', 'tests.yml'], { cwd: dir });
    } catch (error: unknown) {
      const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string };
      assert.fail(`promtool test rules failed:\n${stdout}\n${stderr}`);
    }
    assert.match(result.stdout, /SUCCESS/);
  });
});
