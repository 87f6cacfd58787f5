// The dashboard in a real browser (Debian's Chromium, driven by playwright-core) against
// a controller on the sandbox: what a person sees of a check, two policies and an action
// with a hook; the page following the world live over server-sent events, without a
// reload; the keyboard; forced colours, dark mode and reduced motion; the connection
// state; and no console error (a CSP violation would be one).
//
// Screenshots go to test-artifacts/ (gitignored): dashboard.png, dashboard-dark.png,
// dashboard-forced-colors.png, dashboard-drain.png, dashboard-rollout.png.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser, type Locator, type Page } from 'playwright-core';
import { INSTANCE_LABEL, ROLLOUT_LABEL } from '../../src/api/names.ts';
import type { NodeRollout } from '../../src/api/node-rollout.ts';
import { BOOT_DELAY_ANNOTATION, TALOS_FAULT_ANNOTATION } from '../../sandbox/talos-faults.ts';
import type { Controller } from '../../src/controller.ts';
import { loadTalosConfig } from '../../src/talos/config.ts';
import { cordon } from '../../src/talos/drain.ts';
import { installGatehouseAPI, repoRoot } from '../support/install.ts';
import { createTalosNodes, GROUP_LABEL } from '../support/talos-nodes.ts';
import {
  API,
  createAction,
  createGroupHook,
  createPolicy,
  deleteAfter,
  createTestNodes,
  deleteActionsAfter,
  hookTemplate,
  markExecuted,
  rebootNode,
  startGateController,
  waitForPhase,
  whoami,
} from '../support/gate.ts';
import {
  freshNamespace,
  rest,
  switchableCheck,
  testKubeConfig,
  testSandboxState,
  uniqueName,
  waitFor,
} from '../support/kube.ts';

/** Keeps everyone else's pods off this file's simulated Talos nodes. */
const TAINT = 'gatehouse.test/dashboard';
const CHROMIUM = process.env.GATEHOUSE_TEST_CHROMIUM ?? '/usr/bin/chromium';
const ARTIFACTS = join(repoRoot, 'test-artifacts');

const kc = testKubeConfig();
const client = rest(kc);
const instance = uniqueName('dashboard');
let controller: Controller;
let browser: Browser;
let me = '';

before(async () => {
  if (!existsSync(CHROMIUM))
    throw new Error(
      `no browser at ${CHROMIUM}: install Debian's chromium (apt-get update && apt-get install -y chromium), or point GATEHOUSE_TEST_CHROMIUM at one`,
    );
  await installGatehouseAPI(kc);
  me = await whoami(client);
  // The operator's opt-in: this page shows actions to anonymous readers.
  controller = await startGateController(instance, { dashboardAnonymousActions: true });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  await mkdir(ARTIFACTS, { recursive: true });
});

// A setup that failed half-way (no chromium) must not leave the controller running:
// it would keep the test process, and the whole run, alive.
after(async () => {
  // Either may be unset here: the declared types hold only once before() got that far.
  try {
    await (browser as Browser | undefined)?.close();
  } finally {
    await (controller as Controller | undefined)?.stop();
  }
});

/** Waits until the element's visible text matches. */
async function shows(locator: Locator, pattern: RegExp, timeoutMs = 15_000): Promise<string> {
  return waitFor(
    `${locator.toString()} to show ${String(pattern)}`,
    async (observe) => {
      const text = (await locator.innerText({ timeout: 1000 })).replace(/\s+/g, ' ').trim();
      observe(text);
      return pattern.test(text) ? text : undefined;
    },
    { timeoutMs, intervalMs: 100 },
  );
}

// The browser's own, for functions that run in the page (the project's types have no DOM).
declare const getComputedStyle: (element: unknown) => Record<string, string>;

/**
 * A computed CSS property of the element a locator finds, as the browser resolved it.
 * Live updates replace a row whenever its data changes (its probe time, every second),
 * and a replaced element has no computed style: read again until the element read is
 * still in the document.
 */
async function computed(locator: Locator, property: string): Promise<string> {
  return waitFor(
    `the ${property} of ${String(locator)}`,
    () =>
      locator.evaluate(
        (element: { isConnected: boolean }, name) =>
          element.isConnected ? (getComputedStyle(element)[name] ?? '') : undefined,
        property,
      ),
    { timeoutMs: 5000, intervalMs: 20 },
  );
}

function literal(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** A page that records console errors, uncaught exceptions and navigations. */
async function openPage(url: string): Promise<{ page: Page; errors: string[]; navigations: () => number }> {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const errors: string[] = [];
  let navigations = 0;
  page.on('console', (message) => {
    if (message.type() === 'error') errors.push(message.text());
  });
  page.on('pageerror', (error) => errors.push(error.message));
  page.on('framenavigated', (frame) => {
    if (frame === page.mainFrame()) navigations++;
  });
  await page.goto(url);
  return { page, errors, navigations: () => navigations };
}

describe('dashboard in a browser', () => {
  it('shows checks, policies and an action, follows them live, and works by keyboard and without colour', async (t) => {
    const group = uniqueName('dash');
    const labels = { 'gatehouse.test/group': group };
    const [node] = (await createTestNodes(t, client, group, 2, labels)) as [string, string];
    const namespace = await freshNamespace(t, kc);
    const check = await switchableCheck(t, kc, group, true, { [INSTANCE_LABEL]: instance });
    const budget = uniqueName('budget');
    const nights = uniqueName('nights');
    for (const [name, spec] of [
      [budget, { nodeSelector: { matchLabels: labels }, maxConcurrent: 2 }],
      // Governs only upgrades, so it does not hold the test's reboot; closed but on New Year's night.
      [
        nights,
        {
          nodeSelector: { matchLabels: labels },
          actions: ['Upgrade'],
          windows: [{ schedule: '0 0 1 1 *', duration: '1m' }],
        },
      ],
    ] as const) {
      await createPolicy(t, client, instance, spec, name);
    }
    await client.request(`${API}/namespaces/${namespace}/prerebootjobs`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'PreRebootJob',
        metadata: { name: 'set-noout' },
        spec: { nodeSelector: { matchLabels: labels }, template: hookTemplate('Succeeded', '1s') },
      },
    });
    const created = await createAction(client, instance, me, { nodeName: node });
    const actionName = created.metadata.name;
    deleteActionsAfter(t, client, actionName);
    await waitForPhase(client, actionName, 'Approved');

    const started = Date.now();
    const { page, errors, navigations } = await openPage(`${controller.url}/`);
    await page.evaluate('window.__sameDocument = true');
    const checks = page.getByRole('table', { name: 'Checks' });
    const policies = page.getByRole('table', { name: 'Policies' });
    const actions = page.getByRole('table', { name: 'Actions' });
    const toggle = page.getByRole('button', { name: `Timeline of ${actionName}` });
    const timeline = page.getByRole('list', { name: `Phases of ${actionName}` });

    await t.test('what a person sees', async () => {
      await shows(page.locator('#connection'), /^● live$/);
      assert.equal(await page.getByRole('heading', { level: 1 }).innerText(), 'gatehouse');
      for (const landmark of ['banner', 'main', 'navigation']) {
        assert.equal(await page.getByRole(landmark as 'main').count(), 1, `one ${landmark} landmark`);
      }
      assert.ok((await page.locator('th[scope="col"]').count()) >= 19, 'column headers are scoped');

      const checkRow = checks.getByRole('row', { name: check.name });
      await shows(checkRow, /✓ Healthy/);
      await shows(
        checkRow,
        new RegExp(`Reboot on 2 nodes \\(${group}-1, ${group}-2\\) matching gatehouse.test/group=${group}`),
      );
      assert.match(await checkRow.innerText(), /\d{1,2}:\d{2}:\d{2}/, 'the last probe time');

      await shows(policies.getByRole('row', { name: budget }), /1 of 2 in use.*held by .*Open.*always open/);
      await shows(policies.getByRole('row', { name: nights }), /0 of 1 in use.*Closed.*next opens/);

      const actionRow = actions.getByRole('row', { name: actionName }).first();
      await shows(
        actionRow,
        new RegExp(`Reboot · External.*${node}.*Approved.*${literal(me)}.*none.*Timeline`),
      );
      assert.equal(await toggle.getAttribute('aria-expanded'), 'false');
      assert.equal(await timeline.isVisible(), false, 'the timeline starts closed');
    });

    await t.test(
      'by keyboard: Tab reaches the timeline control, Enter and Space open and close it',
      async () => {
        await page.locator('body').focus();
        const focusKeys: string[] = [];
        for (let i = 0; i < 40; i++) {
          await page.keyboard.press('Tab');
          const key = await page.locator(':focus').getAttribute('data-focus-key');
          focusKeys.push(key ?? '');
          if (key === `toggle:${actionName}`) break;
        }
        assert.equal(
          focusKeys.at(-1),
          `toggle:${actionName}`,
          `focus went through ${String(focusKeys.length)} stops`,
        );
        const outline = await computed(page.locator(':focus'), 'outlineStyle');
        assert.equal(outline, 'solid', 'the focus is visible');

        await page.keyboard.press('Enter');
        assert.equal(await toggle.getAttribute('aria-expanded'), 'true');
        // Each step: symbol (set on the timeline's line, no space in the text), phase, state, time.
        await shows(
          timeline,
          /✓ ?Pending done .*✓ ?WaitingForHealth done .*✓ ?RunningPreHooks done .*▶ ?Approved in progress .*○ ?Executing not yet/,
        );
        await shows(
          timeline,
          new RegExp(
            `✓ Succeeded PreRebootJob ${namespace}/set-noout, attempt 1 — Job \\S+ started .* finished `,
          ),
        );
        await page.keyboard.press('Space');
        assert.equal(await toggle.getAttribute('aria-expanded'), 'false');
        assert.equal(await timeline.isVisible(), false);
        await page.keyboard.press('Space');
        assert.equal(await timeline.isVisible(), true);
      },
    );

    await t.test(
      'live, without a reload: the check turns unhealthy, the action runs to the end',
      async () => {
        await check.set(false);
        await shows(
          checks.getByRole('row', { name: check.name }),
          /✗ Unhealthy.*switched unhealthy by the test/,
        );
        await shows(page.getByRole('log'), new RegExp(`Check ${check.name} is now Unhealthy`));

        await markExecuted(client, actionName);
        await rebootNode(client, node);
        await waitForPhase(client, actionName, 'Succeeded');
        await shows(actions.getByRole('row', { name: actionName }).first(), /✓ Succeeded/);
        await shows(timeline, /✓ ?WaitingForNode done .*✓ ?Succeeded done/);
        await shows(
          page.getByRole('log'),
          new RegExp(`Action ${actionName} \\(Reboot of ${node}\\) is now Succeeded`),
        );
        await shows(policies.getByRole('row', { name: budget }), /0 of 2 in use/);

        assert.equal(await page.evaluate('window.__sameDocument'), true, 'the same document all along');
        assert.equal(navigations(), 1, 'no navigation after the first');
        assert.equal(
          await page.locator(':focus').getAttribute('data-focus-key'),
          `toggle:${actionName}`,
          'the updates left the focus where it was',
        );
        await page.screenshot({ path: join(ARTIFACTS, 'dashboard.png'), fullPage: true });
      },
    );

    await t.test('without colour: forced colours keep state words, symbols and borders', async () => {
      await page.emulateMedia({ forcedColors: 'active' });
      const state = checks.getByRole('row', { name: check.name }).locator('.badge');
      assert.equal(await state.innerText(), '✗ Unhealthy');
      assert.equal(await computed(state, 'borderTopStyle'), 'solid');
      await shows(timeline, /✓ ?Succeeded done/);
      await page.screenshot({ path: join(ARTIFACTS, 'dashboard-forced-colors.png'), fullPage: true });
      await page.emulateMedia({ forcedColors: 'none', colorScheme: 'dark' });
      assert.equal(await computed(page.locator('body'), 'backgroundColor'), 'rgb(13, 17, 23)');
      await page.screenshot({ path: join(ARTIFACTS, 'dashboard-dark.png'), fullPage: true });
      const dot = page.locator('#connection .connection-symbol');
      await page.emulateMedia({ colorScheme: 'light', reducedMotion: 'no-preference' });
      assert.equal(await computed(dot, 'animationName'), 'pulse');
      await page.emulateMedia({ reducedMotion: 'reduce' });
      assert.equal(await computed(dot, 'animationName'), 'none');
    });

    assert.deepEqual(errors, [], 'no console errors (a CSP violation would be one)');
    const streams = controller.dashboard?.streamCount ?? -1;
    assert.ok(streams >= 1, `the page's stream is open (${String(streams)})`);
    await page.close();
    await waitFor(
      'the stream to be let go',
      () => (controller.dashboard?.streamCount === 0 ? true : undefined),
      {
        timeoutMs: 5000,
      },
    );
    t.diagnostic(`browser part took ${String(Date.now() - started)}ms`);
  });

  it("shows what holds a Managed action's drain, then what held it and the undo that followed", async (t) => {
    const sandbox = await testSandboxState();
    assert.ok(sandbox.talosconfig, `the sandbox in ${sandbox.dir} runs no Talos simulator`);
    const own = uniqueName('dashboard-drain');
    const managed = await startGateController(own, {
      dashboardAnonymousActions: true,
      talos: { config: await loadTalosConfig({ path: sandbox.talosconfig }), drainRetryMs: 500 },
    });
    t.after(() => managed.stop());
    const group = uniqueName('dash-drain');
    const [target, spare] = (await createTalosNodes(t, client, {
      group,
      count: 2,
      taint: TAINT,
      kubernetesVersion: sandbox.kubernetesVersion,
      talosVersion: 'v1.13.0',
      addressBlock: 50,
    })) as [string, string];
    const namespace = await freshNamespace(t, kc);
    await createGroupHook(client, { namespace, group }, 'PreRebootJob', 'noout', {
      template: hookTemplate('Succeeded', '1s'),
      undo: { template: hookTemplate('Succeeded', '1s') },
      placement: 'Anywhere',
    });
    // Both pods on the target, and a budget that needs both: no eviction is ever allowed.
    await cordon(client, spare, true);
    await client.request(`/apis/apps/v1/namespaces/${namespace}/deployments`, {
      method: 'POST',
      body: {
        metadata: { name: 'osd' },
        spec: {
          replicas: 2,
          selector: { matchLabels: { app: 'osd' } },
          template: {
            metadata: { labels: { app: 'osd' } },
            spec: {
              nodeSelector: { [GROUP_LABEL]: group },
              tolerations: [{ key: TAINT, operator: 'Exists', effect: 'NoSchedule' }],
              containers: [{ name: 'main', image: 'registry.example/osd' }],
            },
          },
        },
      },
    });
    await client.request(`/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets`, {
      method: 'POST',
      body: {
        metadata: { name: 'osd' },
        spec: { minAvailable: 2, selector: { matchLabels: { app: 'osd' } } },
      },
    });
    await waitFor('the budget to count 2 healthy pods', async () => {
      const pdb = await client.request<{ status?: { currentHealthy?: number } }>(
        `/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets/osd`,
      );
      return pdb.status?.currentHealthy === 2 ? true : undefined;
    });
    const created = await createAction(client, own, me, {
      nodeName: target,
      execution: 'Managed',
      drain: { timeout: '25s' },
    });
    const name = created.metadata.name;
    deleteActionsAfter(t, client, name);

    const { page, errors } = await openPage(`${managed.url}/`);
    await shows(page.locator('#connection'), /^● live$/);
    const row = page.getByRole('table', { name: 'Actions' }).getByRole('row', { name }).first();
    await shows(row, /Executing/, 30_000);
    await page.getByRole('button', { name: `Timeline of ${name}` }).click();
    const blockers = page.getByRole('list', { name: `Evictions refused for ${name}` });
    const pod = `osd-\\S+ blocked by PodDisruptionBudget ${namespace}/osd \\(0 disruptions allowed\\)`;
    await shows(
      blockers,
      new RegExp(`^✗ Refused ${pod} — since \\S+ ✗ Refused ${pod} — since \\S+$`),
      20_000,
    );
    const details = page.locator(`#timeline-${name}`);
    await shows(details, /What holds the drain — evictions refused since \d/);
    await shows(details, /DrainBlocked True \(EvictionsRefused\)/);

    // Past drain.timeout: Failed without a Talos call; what held it stays; the undo runs.
    await waitForPhase(client, name, 'Failed', 60_000);
    await shows(row, /✗ Failed/);
    await shows(details, /What held the drain — evictions refused since/);
    const undo = page.getByRole('list', { name: `Undo runs of ${name}` });
    await shows(
      undo,
      new RegExp(`Succeeded PreRebootJob ${namespace}/noout, attempt 1 — Job \\S+ started .* finished `),
      60_000,
    );
    await page.screenshot({ path: join(ARTIFACTS, 'dashboard-drain.png'), fullPage: true });
    assert.deepEqual(errors, [], 'no console errors');
    await page.close();
  });

  it('draws a rollout: a node map with each state in words, swimlanes of labelled phases, the failure marked, tiles by keyboard', async (t) => {
    const sandbox = await testSandboxState();
    assert.ok(sandbox.talosconfig, `the sandbox in ${sandbox.dir} runs no Talos simulator`);
    const own = uniqueName('dashboard-rollout');
    const managed = await startGateController(own, {
      dashboardAnonymousActions: true,
      talos: { config: await loadTalosConfig({ path: sandbox.talosconfig }), drainRetryMs: 500 },
    });
    t.after(() => managed.stop());
    const group = uniqueName('dash-roll');
    const nodes = await createTalosNodes(t, client, {
      group,
      count: 3,
      taint: TAINT,
      kubernetesVersion: sandbox.kubernetesVersion,
      talosVersion: 'v1.13.0',
      addressBlock: 50,
      // Phases long enough to be drawn with their names: a reboot of 4s, a pre-hook of 2s.
      annotations: { [BOOT_DELAY_ANNOTATION]: '4s' },
    });
    const namespace = await freshNamespace(t, kc);
    await createGroupHook(client, { namespace, group }, 'PreUpgradeJob', 'noout', {
      template: hookTemplate('Succeeded', '2s'),
      placement: 'Anywhere',
    });
    const bad = nodes[1] ?? '';
    const good = nodes.filter((n) => n !== bad);
    await client.request(`/api/v1/nodes/${bad}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { annotations: { [TALOS_FAULT_ANNOTATION]: 'upgrade-error' } } },
    });
    // A window open all along (every hour, for two): shaded behind every lane.
    const window = await createPolicy(t, client, own, {
      nodeSelector: { matchLabels: { [GROUP_LABEL]: group } },
      maxConcurrent: 1,
      windows: [{ schedule: '0 * * * *', duration: '2h' }],
    });
    const name = uniqueName('dash-roll');
    await client.request(`${API}/noderollouts`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'NodeRollout',
        metadata: { name, labels: { [INSTANCE_LABEL]: own } },
        spec: {
          action: 'Upgrade',
          upgrade: { image: 'ghcr.io/siderolabs/installer:v1.13.1' },
          nodeSelector: { matchLabels: { [GROUP_LABEL]: group } },
          groupBy: GROUP_LABEL,
          maxParallel: 1,
          maxFailures: 1,
          requestedBy: me,
        },
      },
    });
    deleteAfter(t, client, `${API}/noderollouts/${name}`);
    // Runs before the rollout's deletion and the controller's stop (after hooks run last first).
    t.after(async () => {
      const list = await client.request<{ items: { metadata: { name: string } }[] }>(
        `${API}/nodeactions?labelSelector=${encodeURIComponent(`${ROLLOUT_LABEL}=${name}`)}`,
      );
      await Promise.all(
        list.items.map((a) =>
          client
            .request(`${API}/nodeactions/${a.metadata.name}`, { method: 'DELETE' })
            .catch(() => undefined),
        ),
      );
    });

    const { page, errors } = await openPage(`${managed.url}/#rollouts`);
    await shows(page.locator('#connection'), /^● live$/);
    const map = page.getByRole('group', { name: `Node map of ${name}` });
    const lanes = page.getByRole('group', { name: `Swimlanes of ${name}` });
    const tile = (node: string, word: string) => map.getByRole('img', { name: `${node}: ${word}` });
    // What is drawn: the SVG text elements' words (not the titles, which show on hover).
    const text = async (locator: Locator) =>
      (await locator.locator('text').allTextContents()).join(' ').replace(/\s+/g, ' ').trim();
    const seen = async (what: string, locator: Locator, timeoutMs = 240_000) =>
      waitFor(what, async () => ((await locator.count()) > 0 ? true : undefined), {
        timeoutMs,
        intervalMs: 100,
      });

    await t.test('live: a node is seen running, then every node ends done or failed', async () => {
      await seen('a tile to say running', map.getByRole('img', { name: /: running: / }), 60_000);
      await waitFor(
        `rollout ${name} to complete`,
        async () => {
          const r = await client.request<NodeRollout>(`${API}/noderollouts/${name}`);
          return r.status?.conditions?.some((c) => c.type === 'Complete' && c.status === 'True')
            ? r
            : undefined;
        },
        { timeoutMs: 240_000, intervalMs: 500 },
      );
      // The segments' times are the actions' own record, written with each phase.
      const list = await client.request<{
        items: { spec: { nodeName: string }; status?: { phaseHistory?: { phase: string }[] } }[];
      }>(`${API}/nodeactions?labelSelector=${encodeURIComponent(`${ROLLOUT_LABEL}=${name}`)}`);
      const history = list.items.find((a) => a.spec.nodeName === good[0])?.status?.phaseHistory;
      assert.ok(history, 'the action has a phase history');
      assert.deepEqual(
        history.map((e) => e.phase),
        [
          'Pending',
          'WaitingForHealth',
          'RunningPreHooks',
          'Approved',
          'Executing',
          'WaitingForNode',
          'RunningPostHooks',
          'Succeeded',
        ].filter((p) => history.some((e) => e.phase === p)),
        'in order',
      );
      assert.equal(history.at(-1)?.phase, 'Succeeded');
      assert.ok(
        history.some((e) => e.phase === 'WaitingForNode'),
        JSON.stringify(history),
      );
      for (const node of good) await seen(`${node} to be done`, tile(node, 'done'), 15_000);
      await seen(`${bad} to be failed`, tile(bad, 'failed'), 15_000);
    });

    await t.test('what a person sees: the node map, the lanes, the failure, the window', async () => {
      assert.equal(await map.getByRole('group', { name: `${GROUP_LABEL}=${group}: 3 nodes` }).count(), 1);
      for (const node of good) assert.match(await text(tile(node, 'done')), new RegExp(`^${node} ✓ done$`));
      assert.match(await text(tile(bad, 'failed')), new RegExp(`^${bad} ✗ failed$`));

      const done = lanes.getByRole('list', { name: `Swimlane of ${good[0] ?? ''}: done` });
      const labels = await done
        .getByRole('listitem')
        .evaluateAll((items: { getAttribute(n: string): string | null }[]) =>
          items.map((i) => i.getAttribute('aria-label') ?? ''),
        );
      const phases = labels.map((l) => l.replace(/^\S+: /, '').replace(/ from .*/, ''));
      for (const phase of [
        'waiting for policies',
        'waiting for health',
        'pre-hooks',
        'executing',
        'waiting for node',
      ])
        assert.ok(phases.includes(phase), `${phase} in ${JSON.stringify(phases)}`);
      assert.ok(phases.indexOf('executing') < phases.indexOf('waiting for node'), 'in their order');
      assert.ok(
        labels.every((l) => / from \d{1,2}:\d{2}:\d{2} to \d{1,2}:\d{2}:\d{2}$/.test(l)),
        labels.join('; '),
      );
      // Drawn words, not only labels for screen readers: each segment wide enough shows its phase.
      const drawn = await done.locator('.segment-label').allTextContents();
      assert.ok(drawn.length >= 2, `segment words drawn: ${JSON.stringify(drawn)}`);
      assert.ok(
        drawn.every((w) => [...phases, 'wait', 'health', 'pre', 'ok', 'exec', 'node', 'post'].includes(w)),
        JSON.stringify(drawn),
      );

      const failed = lanes.getByRole('list', { name: `Swimlane of ${bad}: failed` });
      await seen(
        'the failure mark',
        failed.getByRole('listitem', { name: new RegExp(`^${bad}: Failed: `) }),
        5000,
      );
      assert.match(await text(failed.locator('.mark[data-kind="failed"]')), /^✗ failed$/);

      assert.ok((await lanes.locator('.window-band').count()) >= 3, 'the window shaded behind each lane');
      const legend = page.getByRole('list', { name: `Legend of ${name}` });
      assert.match(
        await legend.innerText(),
        new RegExp(`maintenance window open \\(ActionPolicy ${window}\\)`),
      );
      assert.match(await legend.innerText(), /executing.*waiting for node.*post-hooks.*failed.*held/s);
      await page.locator('#rollouts').screenshot({ path: join(ARTIFACTS, 'dashboard-rollout.png') });
    });

    await t.test('by keyboard: Tab reaches the map once, the arrow keys move across its tiles', async () => {
      await page.locator('body').focus();
      let key: string | null = null;
      for (let i = 0; i < 60 && !key?.startsWith(`tile:${name}:`); i++) {
        await page.keyboard.press('Tab');
        key = await page.locator(':focus').getAttribute('data-focus-key');
      }
      const focused = () => page.locator(':focus').getAttribute('aria-label');
      assert.equal(await focused(), `${nodes[0] ?? ''}: ${nodes[0] === bad ? 'failed' : 'done'}`);
      await page.keyboard.press('ArrowRight');
      assert.equal(await focused(), `${bad}: failed`);
      await page.keyboard.press('End');
      assert.equal(await focused(), `${nodes[2] ?? ''}: done`);
      await page.keyboard.press('Home');
      assert.match((await focused()) ?? '', new RegExp(`^${nodes[0] ?? ''}: `));
      assert.equal(
        await computed(page.locator(':focus .outline'), 'strokeWidth'),
        '4px',
        'the focus is visible',
      );
      // One stop: Tab leaves the map, it does not walk through every tile.
      await page.keyboard.press('Tab');
      assert.notEqual(
        (await page.locator(':focus').getAttribute('data-focus-key')) ?? '',
        `tile:${name}:${bad}`,
      );
      assert.equal(await page.locator(':focus').getAttribute('data-tile'), null);
    });

    assert.deepEqual(errors, [], 'no console errors (a CSP violation would be one)');
    await page.close();
  });

  it('says when the controller is gone, and is not served with dashboard: false', async () => {
    const other = await startGateController(uniqueName('dashboard-alone'), { actions: false });
    let running = true;
    const { page, errors } = await openPage(`${other.url}/dashboard`);
    try {
      await shows(page.locator('#connection'), /live/);
      await shows(page.locator('#policies'), /does not watch ActionPolicies/);
      running = false;
      await other.stop();
      await shows(page.locator('#connection'), /reconnecting…|disconnected/);
      // Reconnection attempts to a closed port are logged by the browser; nothing else is.
      assert.deepEqual(
        errors.filter((e) => !/ERR_CONNECTION_REFUSED|Failed to load resource/.test(e)),
        [],
      );
    } finally {
      await page.close();
      if (running) await other.stop();
    }
    const hidden = await startGateController(uniqueName('no-dashboard'), {
      actions: false,
      dashboard: false,
    });
    try {
      for (const path of ['/', '/dashboard', '/v1/dashboard', '/v1/dashboard/events']) {
        assert.equal((await fetch(`${hidden.url}${path}`)).status, 404, path);
      }
      assert.equal((await fetch(`${hidden.url}/v1/health`)).status, 200, 'the rest of the API is there');
    } finally {
      await hidden.stop();
    }
  });
});
