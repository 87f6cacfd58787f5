// The Talos API client against the sandbox's Talos simulator: real gRPC over real
// mutual TLS (Ed25519, like Talos), each call played on a kwok Node of the test's own.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, describe, it, type TestContext } from 'node:test';
import { status } from '@grpc/grpc-js';
import { NODE_POWER_ANNOTATION } from '../../sandbox/kwok-config.ts';
import { TALOS_VERSION } from '../../sandbox/nodes.ts';
import { freePorts } from '../../sandbox/processes.ts';
import { TALOS_FAULT_ANNOTATION, TALOS_FAULT_MESSAGE_ANNOTATION } from '../../sandbox/talos-faults.ts';
import { ETCD_FAULT_ANNOTATION, ETCD_LEADER_ANNOTATION } from '../../sandbox/talos-etcd.ts';
import { createTalosPki } from '../../sandbox/talos-pki.ts';
import {
  LAST_POWER_OFF_ANNOTATION,
  MACHINE_CONFIG_ANNOTATION,
  MAINTENANCE_ANNOTATION,
  talosCallCounts,
  TalosSimulator,
} from '../../sandbox/talos-simulator.ts';
import { TalosClient, type ImagePullProgress } from '../../src/talos/client.ts';
import { loadTalosConfigFromSecret, type TalosContext } from '../../src/talos/config.ts';
import { readEtcd } from '../../src/talos/etcd.ts';
import { TalosUpgradeFailedError } from '../../src/talos/errors.ts';
import { sleep } from '../../src/wait.ts';
import { freshNamespace, uniqueName, waitFor } from '../support/kube.ts';
import {
  api,
  assertWentDownThenUp,
  BOOTS_BACK_MS,
  context,
  core,
  INSTALLER,
  kc,
  notReady,
  readNode,
  rebooted,
  recordNode,
  sandbox,
  seenOf,
  simulatedNode,
  talos,
  talosconfig,
  talosError,
  talosPki,
} from '../support/talos-simulated.ts';

describe('Talos API client and simulator', () => {
  it('reports the Talos version of a node, by address or name, and of the endpoint itself', async (t) => {
    const node = await simulatedNode(t, { talosVersion: 'v1.12.6' });
    const version = await talos.version({ node: node.ip });
    assert.equal(version.tag, 'v1.12.6');
    // A real node answering a call addressed with `node` sends no common.Metadata.
    assert.equal(version.hostname, '');
    assert.equal(version.os, 'linux');
    assert.equal(version.arch, 'amd64');
    assert.equal((await talos.version({ node: node.name })).tag, 'v1.12.6');
    assert.equal(talosCallCounts((await readNode(node.name)).metadata.annotations).Version, 2);
    const itself = await talos.version();
    assert.deepEqual([itself.tag, itself.hostname], [TALOS_VERSION, '']);

    const error = await talosError(talos.version({ node: '10.5.255.254' }));
    assert.equal(error.failure, 'status');
    assert.equal(error.code, status.UNAVAILABLE);
    assert.match(
      error.message,
      /^Talos MachineService\.Version on node 10\.5\.255\.254 via 127\.0\.0\.1:\d+ failed: .*no route to host/,
    );
  });

  it('reboots a node: NotReady, then a new bootID, then Ready', async (t) => {
    const node = await simulatedNode(t);
    const seen = await recordNode(t, node.name);
    const { actorId } = await talos.reboot({ node: node.ip });
    assert.match(actorId, /^[0-9a-f-]{36}$/);
    const after = await rebooted(node.name, node.bootID);
    assert.equal(after.osImage, 'Talos (v1.13.0)');
    await assertWentDownThenUp(seen, node.bootID);
  });

  it('tells the sequences of this boot through Events: none but the boot until a reboot, which the next boot forgets', async (t) => {
    const node = await simulatedNode(t);
    const sequences = async () =>
      (await talos.eventHistory({ node: node.ip, quietMs: 500 })).sequences.map(
        (e) => `${e.sequence}:${e.action}`,
      );
    assert.deepEqual(await sequences(), ['boot:start', 'boot:stop']);
    await talos.reboot({ node: node.ip });
    // Recorded before the call is answered, as Talos publishes the sequence's start; the
    // node may already be down (unreachable) by the time it is asked.
    try {
      const during = (await talos.eventHistory({ node: node.ip, quietMs: 500 })).sequences;
      assert.ok(
        during.some((e) => e.sequence === 'reboot' && e.action === 'start'),
        JSON.stringify(during),
      );
    } catch (error) {
      assert.match((error as Error).message, /connection refused \(the node is rebooting\)/);
    }
    await rebooted(node.name, node.bootID);
    assert.deepEqual(await sequences(), ['boot:start', 'boot:stop'], 'a new boot, new events');
    assert.ok((talosCallCounts((await readNode(node.name)).metadata.annotations).Events ?? 0) >= 3);
  });

  it('upgrades a Talos 1.13 node: image pull and install with streamed progress, then reboot', async (t) => {
    const node = await simulatedNode(t);
    const image = `${INSTALLER}:v1.13.1`;
    const pulls: ImagePullProgress[] = [];
    const pulled = await talos.pullImage({ node: node.ip, image, onProgress: (p) => pulls.push(p) });
    // The pinned name, as containerd resolved the reference.
    assert.match(pulled.name, /^ghcr\.io\/siderolabs\/installer@sha256:[0-9a-f]{64}$/);
    assert.ok(pulls.some((p) => p.status === 'downloading' && p.offset < p.total));
    assert.ok(pulls.some((p) => p.status === 'extract-complete' && p.offset === p.total));
    assert.equal(new Set(pulls.map((p) => p.layerId)).size, 2);

    const lines: string[] = [];
    const installed = await talos.installUpgrade({
      node: node.ip,
      image,
      onProgress: (line) => lines.push(line),
    });
    assert.ok(lines.length >= 3, `expected several progress lines, got ${JSON.stringify(lines)}`);
    assert.deepEqual(installed.output, lines);
    assert.match(lines.at(-1) ?? '', /installed Talos v1\.13\.1/);
    // Installed, not yet running: that takes the reboot.
    assert.equal(seenOf(await readNode(node.name)).osImage, 'Talos (v1.13.0)');

    const seen = await recordNode(t, node.name);
    await talos.reboot({ node: node.ip });
    const after = await rebooted(node.name, node.bootID);
    assert.equal(after.osImage, 'Talos (v1.13.1)');
    await assertWentDownThenUp(seen, node.bootID);
    assert.equal((await talos.version({ node: node.ip })).tag, 'v1.13.1');
  });

  it('will not install an image that was not pulled first', async (t) => {
    const node = await simulatedNode(t);
    const error = await talosError(talos.installUpgrade({ node: node.ip, image: `${INSTALLER}:v1.13.2` }));
    // Talos's answer: the installer container cannot be created from an image it lacks.
    assert.equal(error.code, status.INTERNAL);
    assert.match(
      error.talosMessage,
      /^upgrade failed: installer image "ghcr\.io\/siderolabs\/installer:v1\.13\.2" not found in containerd store/,
    );
  });

  it('upgrades an older node through the legacy MachineService.Upgrade', async (t) => {
    const node = await simulatedNode(t, { talosVersion: 'v1.12.4' });
    const noPull = await talosError(talos.pullImage({ node: node.ip, image: `${INSTALLER}:v1.12.6` }));
    assert.equal(noPull.code, status.UNIMPLEMENTED);
    assert.match(noPull.talosMessage, /unknown service machine\.ImageService/);
    const unsupported = await talosError(
      talos.installUpgrade({ node: node.ip, image: `${INSTALLER}:v1.12.6` }),
    );
    assert.equal(unsupported.code, status.UNIMPLEMENTED);
    assert.match(
      unsupported.message,
      /LifecycleService\.Upgrade .* failed: unknown service machine\.LifecycleService \(UNIMPLEMENTED\)/,
    );

    const seen = await recordNode(t, node.name);
    const { ack } = await talos.upgrade({ node: node.ip, image: `${INSTALLER}:v1.12.6` });
    assert.equal(ack, 'Upgrade request received');
    const after = await rebooted(node.name, node.bootID);
    assert.equal(after.osImage, 'Talos (v1.12.6)');
    await assertWentDownThenUp(seen, node.bootID);
  });

  it('shuts a node down, and it stays down and unreachable', async (t) => {
    const node = await simulatedNode(t);
    await talos.shutdown({ node: node.ip, force: true });
    await notReady(node.name);
    // Well past kwok's own re-initialisation (within a second) and a boot delay.
    await sleep(BOOTS_BACK_MS + 1000);
    const later = await readNode(node.name);
    assert.notEqual(seenOf(later).ready, 'True');
    assert.equal(seenOf(later).bootID, node.bootID);
    assert.equal(later.metadata.annotations?.[NODE_POWER_ANNOTATION], 'off');
    const error = await talosError(talos.version({ node: node.ip }));
    assert.equal(error.code, status.UNAVAILABLE);
    assert.match(error.talosMessage, /connection refused \(the node is powered off\)/);
  });

  it('resets a node: halted without `reboot`, and its Node stays (Talos never deletes it)', async (t) => {
    const node = await simulatedNode(t);
    const bad = await talosError(
      talos.reset({ node: node.ip, systemPartitionsToWipe: [{ label: 'ROOT', wipe: true }] }),
    );
    // Talos answers an unknown volume with a plain error: code UNKNOWN.
    assert.equal(bad.code, status.UNKNOWN);
    assert.match(bad.talosMessage, /failed to get volume status with label "ROOT"/);

    await talos.reset({
      node: node.ip,
      graceful: true,
      reboot: false,
      systemPartitionsToWipe: [
        { label: 'STATE', wipe: true },
        { label: 'EPHEMERAL', wipe: true },
      ],
    });
    await notReady(node.name);
    await sleep(BOOTS_BACK_MS);
    const halted = await readNode(node.name);
    assert.notEqual(seenOf(halted).ready, 'True');
    assert.equal(seenOf(halted).bootID, node.bootID);
  });

  it('resets a node with `reboot`: back as itself when only user disks were wiped, else in maintenance mode', async (t) => {
    const kept = await simulatedNode(t);
    const seen = await recordNode(t, kept.name);
    await talos.reset({ node: kept.ip, reboot: true, wipeMode: 'user-disks', userDisksToWipe: ['/dev/sdb'] });
    await rebooted(kept.name, kept.bootID);
    await assertWentDownThenUp(seen, kept.bootID);

    const wiped = await simulatedNode(t);
    await talos.reset({ node: wiped.ip, reboot: true, wipeMode: 'system-disk' });
    await notReady(wiped.name);
    await sleep(BOOTS_BACK_MS);
    const node = await readNode(wiped.name);
    assert.notEqual(seenOf(node).ready, 'True');
    assert.equal(node.metadata.annotations?.[MAINTENANCE_ANNOTATION], 'true');
  });

  it('applies a machine configuration without a reboot, with one, and refuses a broken one', async (t) => {
    const node = await simulatedNode(t);
    const config = (hostname: string) =>
      `version: v1alpha1\nmachine:\n  type: worker\n  network:\n    hostname: ${hostname}\n`;
    const digest = async (text: string) => {
      const { createHash } = await import('node:crypto');
      return `sha256:${createHash('sha256').update(text).digest('hex')}`;
    };

    const first = await talos.applyConfiguration({ node: node.ip, data: config('one'), mode: 'no-reboot' });
    assert.deepEqual(first, {
      mode: 'no-reboot',
      modeDetails: 'Applied configuration without a reboot',
      warnings: [],
    });
    const auto = await talos.applyConfiguration({ node: node.ip, data: config('one'), mode: 'auto' });
    assert.equal(auto.mode, 'no-reboot');
    const applied = await readNode(node.name);
    assert.equal(applied.metadata.annotations?.[MACHINE_CONFIG_ANNOTATION], await digest(config('one')));
    assert.equal(seenOf(applied).bootID, node.bootID);

    const seen = await recordNode(t, node.name);
    const second = await talos.applyConfiguration({ node: node.ip, data: config('two'), mode: 'reboot' });
    assert.equal(second.mode, 'reboot');
    await rebooted(node.name, node.bootID);
    await assertWentDownThenUp(seen, node.bootID);
    assert.equal(
      (await readNode(node.name)).metadata.annotations?.[MACHINE_CONFIG_ANNOTATION],
      await digest(config('two')),
    );

    const broken = await talosError(
      talos.applyConfiguration({ node: node.ip, data: 'machine: [', mode: 'no-reboot' }),
    );
    assert.equal(broken.code, status.INVALID_ARGUMENT);
    assert.match(broken.message, /ApplyConfiguration .* failed: failed to parse config: /);
  });
});

describe('Talos simulator per version', () => {
  // machine.env is read by services when they start: ≤ 1.13 cannot apply it live (it is
  // outside what CanApplyImmediate allows), 1.14 applies it and the services see it after
  // a reboot. (machine.install, by contrast, ≤ 1.13 applies live: it is read only at install.)
  const config = (proxy: string | undefined) =>
    `version: v1alpha1\nmachine:\n  type: worker\n${proxy ? `  env:\n    HTTPS_PROXY: ${proxy}\n` : ''}`;

  it('on 1.14: refuses REBOOT outside maintenance mode, and AUTO is NO_REBOOT, applying live what it can', async (t) => {
    const node = await simulatedNode(t, { talosVersion: 'v1.14.0' });
    const refused = await talosError(
      talos.applyConfiguration({ node: node.ip, data: config('http://a:3128'), mode: 'reboot' }),
    );
    assert.equal(refused.code, status.UNIMPLEMENTED);
    assert.equal(
      refused.talosMessage,
      'the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead',
    );
    const auto = await talos.applyConfiguration({
      node: node.ip,
      data: config('http://a:3128'),
      mode: 'auto',
    });
    assert.deepEqual(auto, {
      mode: 'no-reboot',
      modeDetails: 'Applied configuration without a reboot',
      warnings: [],
    });
    const live = await talos.applyConfiguration({
      node: node.ip,
      data: config('http://b:3128'),
      mode: 'no-reboot',
    });
    assert.equal(live.mode, 'no-reboot');
    assert.equal(await talos.machineConfiguration({ node: node.ip }), config('http://b:3128'));
    await sleep(BOOTS_BACK_MS);
    assert.equal(seenOf(await readNode(node.name)).bootID, node.bootID, 'never rebooted');
  });

  it('on 1.13: AUTO reboots when the change needs it, and NO_REBOOT or TRY of such a change is refused', async (t) => {
    const node = await simulatedNode(t, { talosVersion: 'v1.13.9' });
    const live = await talos.applyConfiguration({ node: node.ip, data: config(undefined), mode: 'auto' });
    assert.equal(live.mode, 'no-reboot');
    for (const mode of ['no-reboot', 'try'] as const) {
      const refused = await talosError(
        talos.applyConfiguration({ node: node.ip, data: config('http://a:3128'), mode }),
      );
      assert.equal(refused.code, status.INVALID_ARGUMENT, mode);
      assert.match(
        refused.talosMessage,
        /can't be applied in immediate mode\ndiff:\n {2}machine\.env differs/,
      );
    }
    const seen = await recordNode(t, node.name);
    const auto = await talos.applyConfiguration({
      node: node.ip,
      data: config('http://a:3128'),
      mode: 'auto',
    });
    assert.equal(auto.mode, 'reboot');
    // Until it reboots, another apply is refused.
    const again = await talosError(
      talos.applyConfiguration({ node: node.ip, data: config(undefined), mode: 'auto' }),
    );
    assert.equal(again.code, status.FAILED_PRECONDITION);
    await rebooted(node.name, node.bootID);
    await assertWentDownThenUp(seen, node.bootID);
    assert.equal(await talos.machineConfiguration({ node: node.ip }), config('http://a:3128'));
  });

  it('reboots at once in mode FORCE, shuts down at once with force, gracefully otherwise', async (t) => {
    const forced = await simulatedNode(t, { talosVersion: 'v1.12.6' });
    await talos.reboot({ node: forced.ip, mode: 'force' });
    await rebooted(forced.name, forced.bootID);
    assert.equal((await readNode(forced.name)).metadata.annotations?.[LAST_POWER_OFF_ANNOTATION], 'force');
    const graceful = await simulatedNode(t);
    await talos.shutdown({ node: graceful.ip, force: false });
    await notReady(graceful.name);
    assert.equal(
      (await readNode(graceful.name)).metadata.annotations?.[LAST_POWER_OFF_ANNOTATION],
      'graceful',
    );
  });
});

describe('simulated etcd', () => {
  /** Three control-plane nodes of an etcd cluster of the test's own. */
  async function etcdCluster(t: TestContext, annotations: Record<string, string>[] = []) {
    const cluster = uniqueName('etcd');
    const nodes = await Promise.all(
      [0, 1, 2].map((i) => simulatedNode(t, { etcdCluster: cluster, annotations: annotations[i] ?? {} })),
    );
    return nodes.map((n) => ({ ...n, address: n.ip }));
  }

  it('lists the members, reports each one’s status and the leader, and hands leadership over', async (t) => {
    const nodes = await etcdCluster(t);
    const members = await talos.etcdMemberList({ node: nodes[1]?.ip ?? '' });
    assert.deepEqual(members.map((m) => m.hostname).sort(), nodes.map((n) => n.name).sort());
    const healthy = await readEtcd(talos, nodes, nodes[0]?.name ?? '');
    assert.equal(healthy.healthy, true, healthy.message);
    const leader = healthy.leader;
    assert.ok(leader);
    const leaderNode = nodes.find((n) => n.name === leader.hostname);
    assert.ok(leaderNode);
    // Talos answers with the member leadership moved TO (the first other member listed).
    const forfeited = await talos.etcdForfeitLeadership({ node: leaderNode.ip });
    const others = nodes
      .map((n) => n.name)
      .filter((n) => n !== leaderNode.name)
      .sort();
    assert.equal(forfeited.member, others[0]);
    const after = await readEtcd(talos, nodes, leaderNode.name);
    assert.equal(after.leader?.hostname, forfeited.member);
    assert.equal(after.targetIsLeader, false);
    // Not the leader any more: nothing to hand over.
    assert.equal((await talos.etcdForfeitLeadership({ node: leaderNode.ip })).member, '');
  });

  it('shows a member down, unhealthy, in alarm or learning, and names it', async (t) => {
    const nodes = await etcdCluster(t, [{}, { [ETCD_FAULT_ANNOTATION]: 'unhealthy' }]);
    const [first, second, third] = nodes as [(typeof nodes)[0], (typeof nodes)[0], (typeof nodes)[0]];
    const unhealthy = await readEtcd(talos, nodes, first.name);
    assert.equal(unhealthy.healthy, false);
    assert.match(unhealthy.message, new RegExp(`etcd member ${second.name} is unhealthy`));
    await api.request(`/api/v1/nodes/${second.name}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { annotations: { [ETCD_FAULT_ANNOTATION]: 'nospace' } } },
    });
    assert.match((await readEtcd(talos, nodes, first.name)).message, /alarm NOSPACE on /);
    await api.request(`/api/v1/nodes/${second.name}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { annotations: { [ETCD_FAULT_ANNOTATION]: null } } },
    });
    await talos.shutdown({ node: third.ip, force: true });
    await notReady(third.name);
    const down = await readEtcd(talos, nodes, first.name);
    assert.match(down.message, new RegExp(`etcd member ${third.name} is unreachable`));
  });

  it('refuses the legacy upgrade of a control-plane node etcd cannot spare, unless forced', async (t) => {
    const nodes = await etcdCluster(t, [{}, {}, { [ETCD_FAULT_ANNOTATION]: 'unhealthy' }]);
    const target = nodes[0];
    assert.ok(target);
    await api.request(`/api/v1/nodes/${target.name}`, {
      method: 'PATCH',
      contentType: 'application/merge-patch+json',
      body: { metadata: { annotations: { [ETCD_LEADER_ANNOTATION]: 'true' } } },
    });
    const image = `${INSTALLER}:v1.13.1`;
    const refused = await talosError(talos.upgrade({ node: target.ip, image }));
    // Talos's ValidateForUpgrade, with its words; a plain error: code UNKNOWN.
    assert.equal(refused.code, status.UNKNOWN);
    assert.match(
      refused.talosMessage,
      /^error validating etcd for upgrade: etcd member [0-9a-f]{16} is not healthy; all members must be healthy to perform an upgrade/,
    );
    await talos.upgrade({ node: target.ip, image, force: true });
    await rebooted(target.name, target.bootID);
  });

  it('answers a graceful reset first, then fails its sequence when its member cannot leave etcd', async (t) => {
    const nodes = await etcdCluster(t);
    const [first, second] = nodes as [(typeof nodes)[0], (typeof nodes)[0]];
    await talos.shutdown({ node: second.ip, force: true });
    await notReady(second.name);
    // Talos acknowledges, then leaves etcd in its sequence: etcd refuses, the sequence fails.
    await talos.reset({ node: first.ip, graceful: true, reboot: true });
    const failed = await waitFor('the reset sequence to fail', async () => {
      const history = await talos.eventHistory({ node: first.ip, quietMs: 300 });
      return history.sequences.find((e) => e.sequence === 'reset' && e.action === 'noop');
    });
    assert.match(failed.error ?? '', /sequence failed: failed to leave cluster: .*unhealthy cluster/);
    assert.equal(talosCallCounts((await readNode(first.name)).metadata.annotations).Reset, 1);
    assert.equal(seenOf(await readNode(first.name)).ready, 'True', 'nothing was wiped');
  });

  it('runs on control-plane nodes only: a worker answers UNIMPLEMENTED', async (t) => {
    const worker = await simulatedNode(t);
    const error = await talosError(talos.etcdStatus({ node: worker.ip }));
    assert.equal(error.code, status.UNIMPLEMENTED);
    assert.equal(error.talosMessage, 'etcd status is only available on control plane nodes');
  });

  it('refuses to hand leadership over in an etcd of one member', async (t) => {
    const alone = await simulatedNode(t, { etcdCluster: uniqueName('etcd-one') });
    const error = await talosError(talos.etcdForfeitLeadership({ node: alone.ip }));
    assert.equal(error.code, status.UNKNOWN);
    assert.equal(
      error.talosMessage,
      'failed to forfeit leadership: cannot forfeit leadership, only one member',
    );
  });
});

describe('Talos simulator faults', () => {
  it('fails an upgrade with Talos’ message, and the node stays as it was', async (t) => {
    const node = await simulatedNode(t, {
      annotations: {
        [TALOS_FAULT_ANNOTATION]: 'upgrade-error',
        [TALOS_FAULT_MESSAGE_ANNOTATION]: 'disk /dev/sda is read-only',
      },
    });
    const image = `${INSTALLER}:v1.13.1`;
    await talos.pullImage({ node: node.ip, image });
    const failed = await talosError(talos.installUpgrade({ node: node.ip, image }));
    assert.ok(failed instanceof TalosUpgradeFailedError);
    assert.equal(failed.exitCode, 1);
    assert.equal(failed.node, node.ip);
    assert.match(
      failed.message,
      /LifecycleService\.Upgrade on node .* failed: the installer exited with code 1 \(failure: installers before Talos 1\.14 exit 1 on every failure: its output says why\): error: disk \/dev\/sda is read-only$/,
    );

    const legacy = await talosError(talos.upgrade({ node: node.ip, image }));
    assert.equal(legacy.failure, 'status');
    assert.match(
      legacy.message,
      /MachineService\.Upgrade on node .* failed: disk \/dev\/sda is read-only \(UNKNOWN\)$/,
    );

    await sleep(BOOTS_BACK_MS);
    assert.deepEqual(seenOf(await readNode(node.name)), {
      ready: 'True',
      bootID: node.bootID,
      osImage: 'Talos (v1.13.0)',
    });
  });

  it('fails an image pull with Talos’ message', async (t) => {
    const node = await simulatedNode(t, {
      annotations: {
        [TALOS_FAULT_ANNOTATION]: 'pull-error',
        [TALOS_FAULT_MESSAGE_ANNOTATION]: 'registry said 503',
      },
    });
    const progress: ImagePullProgress[] = [];
    const error = await talosError(
      talos.pullImage({ node: node.ip, image: `${INSTALLER}:v1.13.1`, onProgress: (p) => progress.push(p) }),
    );
    assert.ok(progress.length > 0, 'progress streamed before the failure');
    assert.match(
      error.message,
      /ImageService\.Pull on node .* failed: failed to pull image ".*": registry said 503 \(UNKNOWN\)$/,
    );
  });

  it('keeps a node that never returns down after its reboot', async (t) => {
    const node = await simulatedNode(t, { annotations: { [TALOS_FAULT_ANNOTATION]: 'never-return' } });
    await talos.reboot({ node: node.ip });
    await notReady(node.name);
    await sleep(BOOTS_BACK_MS + 1000);
    const seen = seenOf(await readNode(node.name));
    assert.notEqual(seen.ready, 'True');
    assert.equal(seen.bootID, node.bootID);
  });

  it('ends a hanging call at the client’s deadline (fault injected through the simulator’s API)', async (t) => {
    const node = await simulatedNode(t);
    const simulator = await TalosSimulator.start({
      kubeConfig: kc,
      tls: { ca: talosPki.ca, cert: talosPki.server.cert, key: talosPki.server.key },
    });
    t.after(() => simulator.stop());
    const client = new TalosClient(context, { endpoints: [simulator.endpoint] });
    t.after(() => client.close());

    simulator.injectFault(node.ip, { kind: 'hang', method: 'Reboot' });
    simulator.injectFault(node.name, { kind: 'hang', method: 'LifecycleUpgrade' });
    assert.equal((await client.version({ node: node.ip })).tag, 'v1.13.0');
    const started = Date.now();
    const hung = await talosError(client.reboot({ node: node.ip, timeoutMs: 1500 }));
    assert.equal(hung.failure, 'deadline');
    assert.ok(Date.now() - started >= 1400, 'the call waited for its deadline');
    assert.match(
      hung.message,
      new RegExp(
        `^Talos MachineService\\.Reboot on node ${node.ip.replace(/\./g, '\\.')} via ${simulator.endpoint} failed: no answer within 1\\.5s \\(DEADLINE_EXCEEDED\\)$`,
      ),
    );
    const stream = await talosError(
      client.installUpgrade({ node: node.ip, image: `${INSTALLER}:v1.13.1`, timeoutMs: 1000 }),
    );
    assert.equal(stream.failure, 'deadline');

    const abort = new AbortController();
    setTimeout(() => abort.abort(new Error('operator gave up')), 200);
    const cancelled = await talosError(client.reboot({ node: node.ip, signal: abort.signal }));
    assert.equal(cancelled.failure, 'cancelled');
    assert.match(cancelled.message, /MachineService\.Reboot on node .* failed: cancelled by the caller$/);

    simulator.clearFaults(node.ip);
    assert.equal((await client.version({ node: node.ip })).tag, 'v1.13.0');
    // The hung reboot never happened.
    assert.equal(seenOf(await readNode(node.name)).bootID, node.bootID);
  });
});

describe('Talos API mutual TLS', () => {
  const foreign = (async () => {
    const dir = await mkdtemp(join(tmpdir(), 'foreign-talos-'));
    after(() => rm(dir, { recursive: true, force: true }));
    const pki = await createTalosPki(dir);
    const read = (path: string) => readFile(path, 'utf8');
    return { ca: await read(pki.ca), crt: await read(pki.admin.cert), key: await read(pki.admin.key) };
  })();
  const withCredentials = (credentials: Partial<Pick<TalosContext, 'ca' | 'crt' | 'key'>>): TalosContext => ({
    ...context,
    ...credentials,
    source: 'a test talosconfig',
  });

  it('refuses a client certificate from another CA, and the client says so', async (t) => {
    const node = await simulatedNode(t);
    const { crt, key } = await foreign;
    const client = new TalosClient(withCredentials({ crt, key }), { timeoutMs: 10_000 });
    t.after(() => client.close());
    const error = await talosError(client.version({ node: node.ip }));
    assert.equal(error.failure, 'tls-client-certificate');
    assert.match(
      error.message,
      /^Talos MachineService\.Version on node .* failed: TLS handshake failed: the endpoint refused our client certificate \(.*\); the crt in a test talosconfig must be signed by this cluster's Talos CA$/,
    );
  });

  it('does not trust an endpoint whose certificate another CA signed', async (t) => {
    const { ca } = await foreign;
    const client = new TalosClient(withCredentials({ ca }), { timeoutMs: 10_000 });
    t.after(() => client.close());
    const error = await talosError(client.version());
    assert.equal(error.failure, 'tls-server-certificate');
    assert.match(
      error.message,
      /TLS handshake failed: the endpoint's certificate is not trusted by the talosconfig's CA \(.*certificate.*\); is a test talosconfig for this cluster\?$/,
    );
  });

  it('says an endpoint with nothing listening is unreachable, and moves on to the next endpoint', async () => {
    const { port } = await freePorts(['port']);
    const dead = `127.0.0.1:${String(port)}`;
    const only = new TalosClient(context, { endpoints: [dead], timeoutMs: 10_000 });
    const error = await talosError(only.version());
    only.close();
    assert.equal(error.failure, 'unreachable');
    assert.match(
      error.message,
      new RegExp(`via ${dead} failed: cannot connect to the endpoint: .*ECONNREFUSED`),
    );

    const both = new TalosClient(context, { endpoints: [dead, ...context.endpoints], timeoutMs: 10_000 });
    assert.equal((await both.version()).tag, TALOS_VERSION);
    both.close();
  });
});

describe('sandbox talosconfig', () => {
  it('is loaded from a Kubernetes Secret as from a file', async (t) => {
    const namespace = await freshNamespace(t);
    await core.createNamespacedSecret({
      namespace,
      body: {
        metadata: { name: 'talosconfig' },
        data: { config: (await readFile(talosconfig)).toString('base64') },
      },
    });
    const fromSecret = await loadTalosConfigFromSecret(api, { namespace, name: 'talosconfig' });
    assert.equal(fromSecret.source, `Secret ${namespace}/talosconfig key "config"`);
    const client = new TalosClient(fromSecret);
    t.after(() => client.close());
    assert.equal((await client.version()).tag, TALOS_VERSION);
    await assert.rejects(
      loadTalosConfigFromSecret(api, { namespace, name: 'talosconfig', key: 'talosconfig' }),
      {
        message: `Secret ${namespace}/talosconfig key "talosconfig" does not exist in the Secret (it has: config)`,
      },
    );
  });

  it('is exported by `gatehouse sandbox env`', async () => {
    const { stdout } = await promisify(execFile)(process.execPath, [
      join(import.meta.dirname, '../../src/cli/main.ts'),
      'sandbox',
      'env',
      `--dir=${sandbox.dir}`,
    ]);
    assert.match(stdout, new RegExp(`^export TALOSCONFIG=${talosconfig.replace(/[.]/g, '\\.')}$`, 'm'));
  });
});
