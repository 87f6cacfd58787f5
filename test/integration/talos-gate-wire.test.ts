// The Talos API gate forwards every call it does not gate unchanged (invariant 11):
// compared at the simulator, byte for byte — a unary call, a method gatehouse has no
// .proto for, a server stream of many messages, a client stream, the caller's metadata,
// status codes, cancellation and deadlines.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Metadata, status, type ClientReadableStream, type ServiceError } from '@grpc/grpc-js';
import { digest, logLine, WIRE_METHODS } from '../../sandbox/talos-wire.ts';
import { rest, testKubeConfig, waitFor } from '../support/kube.ts';
import { rawClient, rawUnary, startGateStack, type GateStack } from '../support/talos-gate.ts';

const api = rest(testKubeConfig());
let stack: GateStack;
let cp: string;
let worker: string;

async function addressOf(name: string): Promise<string> {
  const node = await api.request<{ status: { addresses: { type: string; address: string }[] } }>(
    `/api/v1/nodes/${name}`,
  );
  return node.status.addresses.find((a) => a.type === 'InternalIP')?.address ?? '';
}

before(async () => {
  stack = await startGateStack();
  cp = await addressOf('cp-1');
  worker = await addressOf('worker-1');
});
after(() => stack.stop());

const identity = (b: Buffer) => b;
const field = (n: number, value: Buffer) => Buffer.concat([Buffer.from([(n << 3) | 2, value.length]), value]);

describe('the Talos API gate forwards what it does not gate, byte for byte', () => {
  it('a unary call (Version): the same reply bytes through the gate as directly', async () => {
    const direct = rawClient(stack.direct);
    const gated = rawClient(stack.contextFor('reader-ann', ['os:reader']));
    try {
      const a = await rawUnary(direct, '/machine.MachineService/Version', Buffer.alloc(0), { node: cp });
      const b = await rawUnary(gated, '/machine.MachineService/Version', Buffer.alloc(0), { node: cp });
      assert.ok(a.reply.length > 10);
      assert.deepEqual(b.reply, a.reply);
    } finally {
      direct.close();
      gated.close();
    }
  });

  it('a method gatehouse has no .proto for (Hostname), with the caller metadata intact at the simulator', async () => {
    const client = rawClient(stack.contextFor('reader-ann', ['os:reader']));
    try {
      const request = Buffer.from([0x0a, 0x00, 0x92, 0x01, 0x02, 0x68, 0x69]); // fields unknown to anyone: passed as sent
      const before = stack.wire.length;
      const { reply } = await rawUnary(client, WIRE_METHODS.Hostname.path, request, {
        node: cp,
        'x-request-id': 'abc-123',
        'trace-bin': Buffer.from([0, 1, 2, 255]),
      });
      const record = stack.wire.slice(before).find((r) => r.path === WIRE_METHODS.Hostname.path);
      assert.ok(record, 'the simulator saw the call');
      assert.deepEqual(record.requests, [request]);
      assert.deepEqual(record.replies, [reply]);
      assert.deepEqual(record.metadata.node, [cp]);
      assert.deepEqual(record.metadata['x-request-id'], ['abc-123']);
      assert.deepEqual(record.metadata['trace-bin'], [Buffer.from([0, 1, 2, 255]).toString('base64')]);
    } finally {
      client.close();
    }
  });

  it('a server stream of many messages (Logs): every message, in order, as the simulator sent it', async () => {
    const client = rawClient(stack.contextFor('reader-ann', ['os:reader']));
    try {
      const md = new Metadata();
      md.set('node', cp);
      const request = Buffer.concat([
        field(1, Buffer.from('system')),
        field(2, Buffer.from('kubelet')),
        Buffer.from([0x28, 0xd0, 0x0f]),
      ]); // tail_lines 2000
      const before = stack.wire.length;
      const got: Buffer[] = [];
      await new Promise<void>((resolve, reject) => {
        const call = client.makeServerStreamRequest(WIRE_METHODS.Logs.path, identity, identity, request, md);
        call.on('data', (b: Buffer) => got.push(b));
        call.on('error', reject);
        call.on('status', (s) => (s.code === status.OK ? resolve() : reject(new Error(s.details))));
      });
      assert.equal(got.length, 2000);
      assert.deepEqual(got[7], Buffer.concat([Buffer.from([0x12, logLine(7).length]), logLine(7)]));
      const record = stack.wire.slice(before).find((r) => r.path === WIRE_METHODS.Logs.path);
      assert.ok(record);
      assert.deepEqual(record.requests, [request]);
      assert.equal(digest(record.replies), digest(got));
    } finally {
      client.close();
    }
  });

  it('a client stream (EtcdRecover, 8 MiB in chunks): every chunk arrives, and the reply comes back', async () => {
    const client = rawClient(stack.contextFor('admin-ann', ['os:admin']));
    try {
      const chunks = Array.from({ length: 128 }, () =>
        Buffer.concat([Buffer.from([0x12, 0x80, 0x80, 0x04]), randomBytes(65536)]),
      );
      const before = stack.wire.length;
      const md = new Metadata();
      md.set('node', cp);
      md.set('x-upload', 'snapshot-1');
      const reply = await new Promise<Buffer>((resolve, reject) => {
        const call = client.makeClientStreamRequest(
          WIRE_METHODS.EtcdRecover.path,
          identity,
          identity,
          md,
          (error, value) => (error ? reject(error) : resolve(value ?? Buffer.alloc(0))),
        );
        for (const c of chunks) call.write(c);
        call.end();
      });
      const record = stack.wire.slice(before).find((r) => r.path === WIRE_METHODS.EtcdRecover.path);
      assert.ok(record);
      assert.equal(record.requests.length, chunks.length);
      assert.equal(digest(record.requests), digest(chunks));
      assert.deepEqual(record.replies, [reply]);
      assert.deepEqual(record.metadata['x-upload'], ['snapshot-1']);
    } finally {
      client.close();
    }
  });

  it("the node's status passes as it is: EtcdRecover on a worker fails with Talos's code and message", async () => {
    const client = rawClient(stack.contextFor('admin-ann', ['os:admin']));
    try {
      const md = new Metadata();
      md.set('node', worker);
      const error = await new Promise<ServiceError>((resolve) => {
        const call = client.makeClientStreamRequest(
          WIRE_METHODS.EtcdRecover.path,
          identity,
          identity,
          md,
          (e) => resolve(e as ServiceError),
        );
        call.write(Buffer.from([0x12, 0x01, 0x00]));
        call.end();
      });
      assert.equal(error.code, status.FAILED_PRECONDITION);
      assert.equal(error.details, 'etcd recover is only supported on control plane nodes');
    } finally {
      client.close();
    }
  });

  it('a follow stream cancelled by the client is cancelled at the node; a deadline passes through', async () => {
    const client = rawClient(stack.contextFor('reader-ann', ['os:reader']));
    try {
      const md = new Metadata();
      md.set('node', cp);
      const before = stack.wire.length;
      let call: ClientReadableStream<Buffer> | undefined;
      let count = 0;
      await new Promise<void>((resolve) => {
        call = client.makeServerStreamRequest(
          WIRE_METHODS.Logs.path,
          identity,
          identity,
          Buffer.from([0x20, 0x01, 0x28, 0x05]),
          md,
        );
        call.on('data', () => {
          if (++count === 8) resolve();
        });
        call.on('error', () => undefined);
      });
      call?.cancel();
      const record = await waitFor('the simulator to see the cancellation', () =>
        Promise.resolve(stack.wire.slice(before).find((r) => r.path === WIRE_METHODS.Logs.path)),
      );
      assert.ok(record.replies.length >= 8);
      // Events holds its stream open: the caller's deadline ends it, as it would directly.
      const deadline = await new Promise<ServiceError>((resolve) => {
        const events = client.makeServerStreamRequest(
          '/machine.MachineService/Events',
          identity,
          identity,
          Buffer.from([0x08, 0x00]),
          md,
          {
            deadline: Date.now() + 800,
          },
        );
        events.on('data', () => undefined);
        events.on('error', (e: ServiceError) => resolve(e));
      });
      assert.equal(deadline.code, status.DEADLINE_EXCEEDED);
    } finally {
      client.close();
    }
  });
});
