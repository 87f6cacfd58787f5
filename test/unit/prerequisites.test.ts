// What `npm test` and `npm run demo` say, or do, on a machine that lacks something
// (scripts/prerequisites.ts, run as npm's pretest and predemo).
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { GO_VERSION, plan, requirements, type Plan, type Requirement } from '../../scripts/prerequisites.ts';

const chromium: Requirement = {
  what: 'chromium',
  why: "the dashboard test's browser",
  present: false,
  debian: 'chromium',
};
const runc: Requirement = { what: 'runc', why: 'the container image test', present: false, debian: 'runc' };
const go: Requirement = {
  what: 'Go',
  why: "builds the sandbox's control plane",
  present: false,
  otherwise: 'install Go',
};
const have = (r: Requirement): Requirement => ({ ...r, present: true });
function stopMessage(p: Plan): string {
  if (p.kind !== 'stop') assert.fail(`expected a stop, got ${p.kind}`);
  return p.message;
}

it('does nothing when everything is there', () => {
  assert.deepEqual(plan('test', [have(chromium), have(go)], { root: false, sudo: false, apt: true }), {
    kind: 'ready',
  });
});

it('installs the missing Debian packages as root, or with sudo that asks no password', () => {
  assert.deepEqual(plan('test', [chromium, runc, have(go)], { root: true, sudo: false, apt: true }), {
    kind: 'install',
    packages: ['chromium', 'runc'],
    command: [
      'sh',
      '-c',
      'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium runc',
    ],
  });
  const withSudo = plan('test', [chromium], { root: false, sudo: true, apt: true });
  if (withSudo.kind !== 'install') assert.fail(`expected an installation, got ${withSudo.kind}`);
  assert.deepEqual(withSudo.command.slice(0, 2), ['sudo', '-n']);
});

it('stops at once with the exact command when it cannot install', () => {
  const stop = plan('test', [chromium, runc], { root: false, sudo: false, apt: true });
  assert.equal(
    stopMessage(stop),
    [
      'gatehouse: `npm test` needs what this machine lacks:',
      "  chromium (the dashboard test's browser), runc (the container image test):",
      '    sudo apt-get update && sudo apt-get install -y chromium runc',
      'then run it again.',
    ].join('\n'),
  );
});

it('stops for what apt cannot bring, naming the Debian packages too', () => {
  const stop = plan('demo', [go, chromium], { root: true, sudo: false, apt: true });
  assert.equal(
    stopMessage(stop),
    [
      'gatehouse: `npm run demo` needs what this machine lacks:',
      "  chromium (the dashboard test's browser):",
      '    apt-get update && apt-get install -y chromium',
      "  Go (builds the sandbox's control plane):",
      '    install Go',
      'then run it again.',
    ].join('\n'),
  );
});

it('without apt, names the packages for another package manager', () => {
  const stop = plan('test', [runc], { root: true, sudo: false, apt: false });
  assert.ok(stopMessage(stop).includes("install the packages runc (Debian's names)"));
});

it("reads this machine: a missing browser is missing, and Go's command downloads the release", async () => {
  const before = process.env.GATEHOUSE_TEST_CHROMIUM;
  process.env.GATEHOUSE_TEST_CHROMIUM = '/nonexistent/chromium';
  try {
    const found = await requirements('test');
    const browser = found.find((r) => r.what === 'chromium');
    assert.equal(browser?.present, false);
    assert.match(browser.why, /\/nonexistent\/chromium/);
    const otherwise = found.find((r) => r.what === 'Go')?.otherwise ?? '';
    assert.ok(otherwise.includes(`go${GO_VERSION}.linux-`) || otherwise.includes('PATH'), otherwise);
    assert.deepEqual(
      (await requirements('demo')).map((r) => r.what),
      ['openssl', 'Go'],
    );
  } finally {
    if (before === undefined) delete process.env.GATEHOUSE_TEST_CHROMIUM;
    else process.env.GATEHOUSE_TEST_CHROMIUM = before;
  }
});
