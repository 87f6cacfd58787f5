// The executor's side of a talosconfig reload: new credentials are used by the steps
// that start after the switch, a call in flight keeps the client it started with (it is
// neither cut off nor made again), and the old client is closed once nothing uses it.
// Without any credentials yet the executor reports nothing, exactly like no executor.
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createTalosPki } from '../../sandbox/talos-pki.ts';
import { decide } from '../../src/actions/decide.ts';
import type { RestClient } from '../../src/kube/rest.ts';
import { silentLogger } from '../../src/log.ts';
import { TalosClient } from '../../src/talos/client.ts';
import type { TalosContext } from '../../src/talos/config.ts';
import { TalosExecutor } from '../../src/talos/execution.ts';
import { rebootSteps } from '../../src/talos/plan.ts';
import { waitFor } from '../../src/wait.ts';
import { action, admitted, input, T0 } from './action-fixtures.ts';

/** An endpoint that accepts connections and never answers: a call to it stays in flight. */
const sockets = new Set<Socket>();
const silent = createServer((socket) => sockets.add(socket));
let endpoint = '';
let dir = '';
let pem = { ca: '', crt: '', key: '' };

before(async () => {
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  endpoint = `127.0.0.1:${String((silent.address() as AddressInfo).port)}`;
  dir = await mkdtemp(join(tmpdir(), 'gatehouse-executor-reload-'));
  const pki = await createTalosPki(dir);
  const read = (path: string) => readFile(path, 'utf8');
  pem = { ca: await read(pki.ca), crt: await read(pki.admin.cert), key: await read(pki.admin.key) };
});
after(async () => {
  for (const s of sockets) s.destroy();
  silent.close();
  await rm(dir, { recursive: true, force: true });
});

const context = (name: string): TalosContext => ({
  name,
  endpoints: [endpoint],
  nodes: [],
  ...pem,
  source: `test ${name}`,
});

function executor(initial: TalosContext | undefined): TalosExecutor {
  return new TalosExecutor({
    rest: {} as RestClient,
    log: silentLogger(),
    context: initial,
    namespace: 'gatehouse-system',
    node: (name) => ({
      metadata: { name },
      status: { addresses: [{ type: 'InternalIP', address: '10.5.0.9' }] },
    }),
    mayWrite: () => true,
    client: { timeoutMs: 60_000 },
  });
}

describe('Talos executor: credentials switched while it runs', () => {
  it('lets a call in flight finish on the client it started with, and closes that client after it', async (t) => {
    const closed: string[] = [];
    const close = Object.getOwnPropertyDescriptor(TalosClient.prototype, 'close')?.value as (
      this: TalosClient,
    ) => void;
    t.mock.method(TalosClient.prototype, 'close', function (this: TalosClient) {
      closed.push(this.context.name);
      close.call(this);
    });
    const ex = executor(context('first'));
    t.after(() => ex.close());
    const reboot = action({ execution: 'Managed' }, undefined, { uid: 'uid-call' });
    let confirmed = 0;
    ex.start('call', {
      action: reboot,
      talos: () => rebootSteps(reboot.spec, undefined),
      onChange: () => undefined,
      confirm: () => {
        confirmed += 1;
        return Promise.resolve(true);
      },
    });
    await waitFor(
      'the call to be on the wire',
      () => (/waiting for Talos to answer/.test(ex.facts('uid-call').call?.message ?? '') ? true : undefined),
      { timeoutMs: 5000, intervalMs: 5 },
    );

    ex.useCredentials(context('second'));
    assert.equal(ex.context?.name, 'second', 'new steps use the new credentials');
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(ex.facts('uid-call').call?.state, 'running', 'the call in flight goes on');
    assert.deepEqual(closed, [], 'its client stays open while it is in flight');

    ex.stop('uid-call', 'the test is over');
    const ended = await waitFor(
      'the call to end',
      () => {
        const call = ex.facts('uid-call').call;
        return call?.state === 'running' ? undefined : call;
      },
      { timeoutMs: 5000, intervalMs: 5 },
    );
    assert.equal(ended.state, 'failed');
    assert.deepEqual(closed, ['first'], 'closed once its last call ended');
    assert.equal(confirmed, 1);

    // Nothing holds the second client: replaced, it is closed at once (once made: the
    // client's code loads on first use, so closing waits for the client to exist).
    ex.useCredentials(context('third'));
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(closed, ['first', 'second']);
    ex.close();
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(closed, ['first', 'second', 'third']);
  });

  it('without credentials, reports nothing, and the decision core decides as without an executor', () => {
    const ex = executor(undefined);
    assert.equal(ex.context, undefined);
    // It knows no step, and says it cannot talk to Talos: it would only drain (a Maintenance).
    assert.deepEqual(ex.facts('uid-action-1'), {});
    assert.equal(ex.talking, false);
    const inputs = [
      input({ action: action({ execution: 'Managed' }, admitted(T0, { phase: 'RunningPreHooks' })) }),
      input({
        action: action(
          { execution: 'Managed' },
          admitted(T0, { phase: 'Approved', approvalTime: T0.toISOString(), bootIDBefore: 'boot-1' }),
        ),
      }),
    ];
    for (const i of inputs) {
      const without = decide(i);
      assert.deepEqual(decide({ ...i, execution: ex.facts(i.action.metadata.uid), noTalos: true }), without);
      if (i.action.status?.phase === 'RunningPreHooks')
        assert.equal(
          without.status.conditions?.find((c) => c.type === 'Executed')?.reason,
          'ExecutorNotInstalled',
        );
    }

    ex.useCredentials(context('appeared'));
    assert.deepEqual(ex.facts('uid-action-1'), {});
    assert.equal(ex.talking, true);
    const [pending] = inputs;
    assert.ok(pending);
    const approved = decide({ ...pending, execution: ex.facts('uid-action-1') });
    assert.match(approved.status.message ?? '', /performs it through the Talos API/);
    ex.close();
  });
});
