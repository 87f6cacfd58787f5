// The Talos simulator no kinder than a node (issue 30, item 7): what Talos's own server
// and sequencer do, per version, and what the tests used to be spared — the empty first
// event and the bounded history of Events, images per containerd instance and named as
// containerd names them, the installer's exit codes, what Reset accepts and wipes, TRY
// reverted at its timeout, CRI restarted by a 1.14 change, Rollback.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import { Client, credentials, Metadata, status, type ServiceError } from '@grpc/grpc-js';
import { TALOS_VERSION } from '../../sandbox/nodes.ts';
import { EVENT_HISTORY, EVENTS_ANNOTATION, xidAt } from '../../sandbox/talos-events.ts';
import { WIPED_ANNOTATION } from '../../sandbox/talos-reset.ts';
import {
  CRI_RESTARTS_ANNOTATION,
  INSTALLER_EXIT_ANNOTATION,
  MACHINE_CONFIG_ANNOTATION,
} from '../../sandbox/talos-simulator.ts';
import { ContainerDriver, ContainerdNamespace } from '../../src/talos/gen/gatehouse/talos/common_pb.ts';
import { TalosUpgradeFailedError } from '../../src/talos/errors.ts';
import {
  deserializer,
  ImageService,
  MachineService,
  serializer,
  type Method,
} from '../../src/talos/services.ts';
import { sleep } from '../../src/wait.ts';
import { uniqueName, waitFor } from '../support/kube.ts';
import {
  api,
  BOOTS_BACK_MS,
  context,
  INSTALLER,
  readNode,
  rebooted,
  seenOf,
  simulatedNode,
  talos,
  talosError,
} from '../support/talos-simulated.ts';

const endpoint = context.endpoints[0] ?? '';
const [host = ''] = endpoint.split(':');

/** Every reply of a server-streaming call, made raw (what TalosClient never sends). */
async function rawStream(def: Method, request: unknown, node: string): Promise<unknown[]> {
  const client = new Client(
    endpoint,
    credentials.createSsl(Buffer.from(context.ca), Buffer.from(context.key), Buffer.from(context.crt), {
      checkServerIdentity: (_name: string, cert: PeerCertificate) => checkServerIdentity(host, cert),
    }),
    { 'grpc.ssl_target_name_override': 'talos-api' },
  );
  const md = new Metadata();
  md.set('node', node);
  const replies: unknown[] = [];
  try {
    await new Promise<void>((resolve, reject) => {
      const call = client.makeServerStreamRequest(
        def.path,
        serializer(def.request),
        deserializer(def.response),
        request as never,
        md,
        { deadline: new Date(Date.now() + 2000) },
      );
      call.on('data', (reply: unknown) => replies.push(reply));
      call.on('error', (error: ServiceError) =>
        error.code === status.DEADLINE_EXCEEDED ? resolve() : reject(error),
      );
      call.on('end', () => resolve());
    });
  } finally {
    client.close();
  }
  return replies;
}

const patchAnnotations = (name: string, annotations: Record<string, string | null>) =>
  api.request(`/api/v1/nodes/${name}`, {
    method: 'PATCH',
    contentType: 'application/merge-patch+json',
    body: { metadata: { annotations } },
  });

describe('Talos simulator: Events', () => {
  it('sends an empty first event, then only the last 990 the node keeps', async (t) => {
    const node = await simulatedNode(t);
    const [first] = (await rawStream(MachineService.Events, { tailEvents: -1 }, node.ip)) as {
      id: string;
      data?: { typeUrl: string; value: Uint8Array };
    }[];
    assert.ok(first?.data, 'an empty first event, with its data');
    assert.equal(first.data.typeUrl, '', 'the hello event carries no payload');
    assert.equal(first.data.value.length, 0);
    assert.match(first.id, /^[0-9a-v]{20}$/);

    // A node up for a while: its ring holds other events, the oldest younger than a call.
    const old = new Date(Date.now() - 600_000);
    const filler = Array.from({ length: 1200 }, (_, i) => ({
      id: xidAt(new Date(old.getTime() + i * 100)),
      type: 'ServiceStateEvent',
    }));
    await patchAnnotations(node.name, { [EVENTS_ANNOTATION]: JSON.stringify(filler) });
    const history = await talos.eventHistory({ node: node.ip, quietMs: 500 });
    assert.equal(history.kept, EVENT_HISTORY);
    assert.equal(history.sequences.length, 0);
    assert.equal(
      Math.floor((history.oldest?.getTime() ?? 0) / 1000),
      Math.floor((old.getTime() + (1200 - EVENT_HISTORY) * 100) / 1000),
    );
  });

  it('names a staged legacy upgrade stageUpgrade, as Talos does', async (t) => {
    const node = await simulatedNode(t, { talosVersion: 'v1.12.6' });
    await talos.upgrade({ node: node.ip, image: `${INSTALLER}:v1.12.7`, stage: true });
    const during = await talos.eventHistory({ node: node.ip, quietMs: 300 }).catch(() => undefined);
    if (during)
      assert.ok(during.sequences.some((e) => e.sequence === 'stageUpgrade' && e.action === 'start'));
    const after = await rebooted(node.name, node.bootID);
    assert.equal(after.osImage, 'Talos (v1.12.7)');
  });
});

describe('Talos simulator: images', () => {
  const pull = (node: string, image: string, driver: number, namespace: number) =>
    rawStream(ImageService.Pull, { containerd: { driver, namespace }, imageRef: image }, node);

  it('refuses a containerd instance Talos lacks, and keeps images per instance', async (t) => {
    const node = await simulatedNode(t);
    await assert.rejects(pull(node.ip, 'alpine:3', ContainerDriver.CONTAINERD, ContainerdNamespace.NS_CRI), {
      code: status.INVALID_ARGUMENT,
      details: 'cannot use CRI namespace with containerd driver',
    });
    // Pulled into the system containerd's system namespace: the CRI driver's cannot find it.
    await pull(node.ip, `${INSTALLER}:v1.13.2`, ContainerDriver.CONTAINERD, ContainerdNamespace.NS_SYSTEM);
    const missing = await talosError(talos.installUpgrade({ node: node.ip, image: `${INSTALLER}:v1.13.2` }));
    assert.equal(missing.code, status.INTERNAL);
  });

  it('returns a digested reference as it is, and names short ones as containerd does', async (t) => {
    const node = await simulatedNode(t);
    const digested = `${INSTALLER}@sha256:${'c'.repeat(64)}`;
    assert.equal((await talos.pullImage({ node: node.ip, image: digested })).name, digested);
    const short = await talos.pullImage({ node: node.ip, image: 'installer:v1.13.2' });
    assert.match(short.name, /^docker\.io\/library\/installer@sha256:[0-9a-f]{64}$/);
    // Looked up by exactly the name given: the short one is not it, the normalised one is.
    const byShort = await talosError(talos.installUpgrade({ node: node.ip, image: 'installer:v1.13.2' }));
    assert.equal(byShort.code, status.INTERNAL);
    await talos.installUpgrade({ node: node.ip, image: 'docker.io/library/installer:v1.13.2' });
  });
});

describe('Talos simulator: the installer', () => {
  it('exits with a code per kind of failure from 1.14, with 1 before, and checks the upgrade path', async (t) => {
    const node = await simulatedNode(t, { annotations: { [INSTALLER_EXIT_ANNOTATION]: '3' } });
    const install = async (image: string) => {
      await talos.pullImage({ node: node.ip, image });
      const error = await talosError(talos.installUpgrade({ node: node.ip, image }));
      assert.ok(error instanceof TalosUpgradeFailedError);
      return error;
    };
    const unsupported = await install('factory.talos.dev/installer/abc:v1.14.0');
    assert.equal(unsupported.exitCode, 3);
    assert.match(unsupported.message, /\(unsupported: .* permanent, not retried\)/);
    assert.equal((await install(`${INSTALLER}:v1.13.2`)).exitCode, 1, 'a 1.13 installer exits 1');
    // The pre-flight check of the upgrade path: environment, exit code 4.
    await patchAnnotations(node.name, { [INSTALLER_EXIT_ANNOTATION]: null });
    const path = await install('factory.talos.dev/installer/abc:v1.16.0');
    assert.equal(path.exitCode, 4);
    assert.match(
      path.output.join('\n'),
      /pre-flight checks failed: upgrades to version 1\.16\.0 are not supported/,
    );
  });
});

describe('Talos simulator: Reset', () => {
  it('wipes only the user disks it is given, refuses what Talos refuses, and names 1.14 partitions', async (t) => {
    const node = await simulatedNode(t);
    const combination = await talosError(
      talos.reset({ node: node.ip, wipeMode: 'system-disk', userDisksToWipe: ['/dev/sdb'] }),
    );
    assert.equal(combination.code, status.UNKNOWN);
    assert.match(combination.talosMessage, /wipe mode SYSTEM_DISK doesn't support UserDisksToWipe/);
    const partitions = await talosError(
      talos.reset({
        node: node.ip,
        wipeMode: 'user-disks',
        systemPartitionsToWipe: [{ label: 'STATE', wipe: true }],
      }),
    );
    assert.match(partitions.talosMessage, /wipe mode USER_DISKS doesn't support SystemPartitionsToWipe/);
    const etcd = await talosError(
      talos.reset({ node: node.ip, systemPartitionsToWipe: [{ label: 'ETCD', wipe: true }] }),
    );
    assert.match(
      etcd.talosMessage,
      /failed to get volume status with label "ETCD"/,
      'no such volume before 1.14',
    );

    await talos.reset({ node: node.ip, wipeMode: 'user-disks', userDisksToWipe: ['/dev/sdc'], reboot: true });
    await rebooted(node.name, node.bootID);
    assert.deepEqual(
      JSON.parse((await readNode(node.name)).metadata.annotations?.[WIPED_ANNOTATION] ?? '{}'),
      {
        mode: 'USER_DISKS',
        disks: ['/dev/sdc'],
        partitions: [],
      },
    );
  });
});

describe('Talos simulator: TRY, CRI restarts, Rollback', () => {
  const config = (hostname: string, extra = '') =>
    `version: v1alpha1\nmachine:\n  type: worker\n  network:\n    hostname: ${hostname}\n${extra}`;
  const digestOf = async (name: string) =>
    (await readNode(name)).metadata.annotations?.[MACHINE_CONFIG_ANNOTATION];

  for (const version of ['v1.13.9', 'v1.14.0'])
    it(`reverts a TRY at its timeout unless applied again first (${version})`, async (t) => {
      const node = await simulatedNode(t, { talosVersion: version });
      await talos.applyConfiguration({ node: node.ip, data: config('kept'), mode: 'no-reboot' });
      const kept = await digestOf(node.name);
      const tried = await talos.applyConfiguration({
        node: node.ip,
        data: config('tried'),
        mode: 'try',
        tryModeTimeoutMs: 1500,
      });
      assert.equal(tried.mode, 'try');
      assert.match(tried.modeDetails, /automatically reverted back in 1\.5s/);
      assert.notEqual(await digestOf(node.name), kept);
      await waitFor('the try to be reverted', async () =>
        (await digestOf(node.name)) === kept ? true : undefined,
      );
      // Confirmed: a NO_REBOOT inside the window cancels the revert.
      await talos.applyConfiguration({
        node: node.ip,
        data: config('tried'),
        mode: 'try',
        tryModeTimeoutMs: 1500,
      });
      await talos.applyConfiguration({ node: node.ip, data: config('tried'), mode: 'no-reboot' });
      const confirmed = await digestOf(node.name);
      await sleep(2500);
      assert.equal(await digestOf(node.name), confirmed);
      assert.equal(await talos.machineConfiguration({ node: node.ip }), config('tried'));
    });

  it('restarts CRI on 1.14 when its configuration changes: pods restart, the Node stays Ready', async (t) => {
    const node = await simulatedNode(t, { talosVersion: 'v1.14.0' });
    const pod = uniqueName('cri');
    await api.request('/api/v1/namespaces/default/pods', {
      method: 'POST',
      body: {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: pod },
        spec: {
          nodeName: node.name,
          tolerations: [{ operator: 'Exists' }],
          containers: [{ name: 'app', image: 'app:1' }],
        },
      },
    });
    t.after(() =>
      api.request(`/api/v1/namespaces/default/pods/${pod}`, { method: 'DELETE' }).catch(() => undefined),
    );
    const restarts = async () =>
      ((
        await api.request<{ status?: { containerStatuses?: { restartCount: number }[] } }>(
          `/api/v1/namespaces/default/pods/${pod}`,
        )
      ).status?.containerStatuses ?? [])[0]?.restartCount;
    await waitFor('the pod to run', async () => ((await restarts()) === 0 ? true : undefined));
    const customization = config(
      'a',
      '---\napiVersion: v1alpha1\nkind: CRICustomizationConfig\nname: nri\ncontent: |\n  [plugins]\n',
    );
    await talos.applyConfiguration({ node: node.ip, data: config('a'), mode: 'no-reboot' });
    assert.equal(await restarts(), 0, 'a change that leaves CRI alone restarts nothing');
    await talos.applyConfiguration({ node: node.ip, data: customization, mode: 'auto' });
    assert.equal(await restarts(), 1);
    const after = await readNode(node.name);
    assert.equal(after.metadata.annotations?.[CRI_RESTARTS_ANNOTATION], '1');
    assert.equal(seenOf(after).ready, 'True');
    assert.equal(seenOf(after).bootID, node.bootID);
  });

  it('rolls an upgraded node back to its previous version, answering before it is back', async (t) => {
    const node = await simulatedNode(t);
    const none = await talosError(talos.rollback({ node: node.ip }));
    assert.match(none.talosMessage, /no previous installation/);
    const image = `${INSTALLER}:v1.13.1`;
    await talos.pullImage({ node: node.ip, image });
    await talos.installUpgrade({ node: node.ip, image });
    await talos.reboot({ node: node.ip });
    const upgraded = await rebooted(node.name, node.bootID);
    assert.equal(upgraded.osImage, 'Talos (v1.13.1)');
    await talos.rollback({ node: node.ip });
    const back = await rebooted(node.name, upgraded.bootID);
    assert.equal(back.osImage, `Talos (${TALOS_VERSION})`);
    await sleep(BOOTS_BACK_MS);
  });
});
