// The protobuf NodeList decoder gives exactly the objects JSON.parse gives of the same list
// served as JSON, however the body is cut into chunks; skips the members it is told to omit
// without looking into them; and refuses — naming the message and field — what it does not
// know, so that the informer can list in JSON instead of dropping data.
import assert from 'node:assert/strict';
import { it } from 'node:test';
import fc from 'fast-check';
import { NODE_LIST } from '../../src/kube/node-protobuf.ts';
import { NODE_UNREAD } from '../../src/kube/nodes.ts';
import {
  ProtobufDecodeError,
  ProtobufListDecoder,
  ProtobufUnknownFieldError,
  decodeStatus,
} from '../../src/kube/protobuf.ts';
import { Writer, arbitraryNode, encodeNode, encodeNodeList } from './node-protobuf-fixtures.ts';
import { writeInCuts } from '../support/cuts.ts';

type Json = Record<string, unknown>;
const OMIT = [['metadata', 'managedFields'], ...NODE_UNREAD];

function decode(body: Buffer, cuts: number[] = [], omit: readonly (readonly string[])[] = []) {
  const items: unknown[] = [];
  const decoder = new ProtobufListDecoder(NODE_LIST, (item) => items.push(item), { omit });
  writeInCuts(decoder, body, cuts);
  return { items, fields: decoder.end() };
}

/** The node as JSON.parse gives it, without the omitted members. */
function omitted(node: Json): Json {
  const copy = structuredClone(node) as { metadata: Json; status: Json };
  delete copy.metadata.managedFields;
  delete copy.status.images;
  delete copy.status.volumesInUse;
  delete copy.status.volumesAttached;
  return copy;
}

const busy: Json = {
  metadata: {
    name: 'worker-1',
    uid: '0b7f3c1e-2f5d-4c59-9a57-9d7a1f0e2c11',
    resourceVersion: '12770',
    generation: 3,
    creationTimestamp: '2026-12-04T22:20:34Z',
    labels: { 'kubernetes.io/hostname': 'worker-1', 'node-role.kubernetes.io/worker': '' },
    annotations: { 'talos.dev/audit': '{"bootID":"b-1"}', note: 'naïve 日本 😀' },
    ownerReferences: [{ apiVersion: 'v1', kind: 'ConfigMap', name: 'owner', uid: 'u-1', controller: false }],
    finalizers: ['gatehouse.test/hold'],
    managedFields: [
      {
        manager: 'kubelet',
        operation: 'Update',
        apiVersion: 'v1',
        time: '2026-12-04T22:20:34Z',
        fieldsType: 'FieldsV1',
        fieldsV1: { 'f:status': { 'f:nodeInfo': {} } },
        subresource: 'status',
      },
    ],
  },
  spec: {
    unschedulable: true,
    taints: [
      { key: 'node.kubernetes.io/unschedulable', effect: 'NoSchedule', timeAdded: '2026-12-04T22:19:00Z' },
      { key: 'talos.dev/preready', value: 'boot', effect: 'NoExecute' },
    ],
  },
  status: {
    capacity: { cpu: '4', memory: '16Gi' },
    allocatable: { cpu: '3900m', memory: '15Gi' },
    conditions: [
      {
        type: 'Ready',
        status: 'False',
        lastHeartbeatTime: null,
        lastTransitionTime: '1970-01-01T00:00:00Z',
        reason: 'Test',
        message: 'a "quoted", [bracketed] message',
      },
    ],
    addresses: [{ type: 'InternalIP', address: '10.5.0.2' }],
    daemonEndpoints: { kubeletEndpoint: { Port: 10250 } },
    nodeInfo: {
      machineID: 'm',
      systemUUID: 's',
      bootID: 'b-1',
      kernelVersion: '6.18.1-talos',
      osImage: 'Talos (v1.13.0)',
      containerRuntimeVersion: 'containerd://2.1.5',
      kubeletVersion: 'v1.36.3',
      kubeProxyVersion: '',
      operatingSystem: 'linux',
      architecture: 'amd64',
    },
    images: [{ names: ['registry.example/app:v1'], sizeBytes: 1234 }],
    volumesInUse: ['kubernetes.io/csi/driver^volume-1'],
    volumesAttached: [{ name: 'kubernetes.io/csi/driver^volume-1', devicePath: '' }],
  },
};

/** A Node with nothing set: Go's zero values as its JSON has them. */
const bare: Json = {
  metadata: { name: 'bare' },
  spec: {},
  status: {
    daemonEndpoints: { kubeletEndpoint: { Port: 0 } },
    nodeInfo: {
      machineID: '',
      systemUUID: '',
      bootID: '',
      kernelVersion: '',
      osImage: '',
      containerRuntimeVersion: '',
      kubeProxyVersion: '',
      kubeletVersion: '',
      operatingSystem: '',
      architecture: '',
    },
  },
};

const listMeta = {
  resourceVersion: '16072',
  continue: 'eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ',
  remainingItemCount: 4998,
};

it('decodes Nodes whole into their JSON, and the list metadata', () => {
  const { items, fields } = decode(encodeNodeList([busy, bare], listMeta));
  assert.deepEqual(items, [busy, bare]);
  assert.deepEqual(fields, { kind: 'NodeList', apiVersion: 'v1', metadata: listMeta });
});

it('leaves out the omitted members, and gives the same objects however the body is cut', () => {
  const body = encodeNodeList([busy, bare, busy], listMeta);
  const want = [omitted(busy), omitted(bare), omitted(busy)];
  for (let cut = 0; cut <= body.length; cut++)
    assert.deepEqual(decode(body, [cut], OMIT).items, want, `cut at ${String(cut)}`);
  // One byte at a time: every header and every element cut everywhere at once.
  const oneByOne = Array.from({ length: body.length }, (_, i) => i);
  assert.deepEqual(decode(body, oneByOne, OMIT).items, want);
});

it('equals the JSON of any Node, cut anywhere (property)', () => {
  fc.assert(
    fc.property(
      fc.array(arbitraryNode, { maxLength: 4 }),
      fc.array(fc.nat(), { maxLength: 8 }),
      fc.boolean(),
      (nodes, cuts, omit) => {
        const body = encodeNodeList(nodes, { resourceVersion: '5' });
        const { items, fields } = decode(
          body,
          cuts.map((c) => c % (body.length + 1)),
          omit ? OMIT : [],
        );
        // As JSON.parse gives them (fast-check's records have no prototype).
        const served = JSON.parse(JSON.stringify(nodes)) as Json[];
        assert.deepEqual(items, omit ? served.map(omitted) : served);
        assert.deepEqual(fields.metadata, { resourceVersion: '5' });
      },
    ),
    { numRuns: 300 },
  );
});

it('reads int64 beyond 2^53 and negative ones as JSON.parse reads their decimals', () => {
  for (const [generation, json] of [
    [2n ** 62n + 1n, '4611686018427387905'],
    [-1n, '-1'],
    [-(2n ** 63n), '-9223372036854775808'],
    [2n ** 53n - 1n, '9007199254740991'],
  ] as const) {
    const node = new Writer().message(1, (m) => m.string(1, 'n').int(7, generation)).bytes;
    const [item] = decode(encodeNodeList([node])).items as { metadata: { generation: number } }[];
    assert.equal(item?.metadata.generation, JSON.parse(json) as number);
  }
});

it('refuses a field it does not know, naming the message and the field', () => {
  const withField = (build: (w: Writer) => void) => encodeNodeList([encodeNode(bare, { status: build })]);
  const unknown = (body: Buffer, messageType: string, fieldNumber: number) =>
    assert.throws(
      () => decode(body, [], OMIT),
      (error: unknown) =>
        error instanceof ProtobufUnknownFieldError &&
        error.messageType === messageType &&
        error.fieldNumber === fieldNumber &&
        error.message.includes(`${messageType} has field ${String(fieldNumber)}`),
    );
  unknown(
    withField((w) => w.string(15, 'a newer status field')),
    'NodeStatus',
    15,
  );
  unknown(
    withField((w) => w.int(99, 1)),
    'NodeStatus',
    99,
  );
  unknown(
    withField((w) => w.message(4, (c) => c.string(7, 'x'))),
    'NodeCondition',
    7,
  );
  unknown(
    withField((w) => w.message(7, (i) => i.string(12, 'x'))),
    'NodeSystemInfo',
    12,
  );
  // A field of the list itself, and of the envelope.
  const list = encodeNodeList([bare]);
  unknown(
    Buffer.concat([list.subarray(0, 4), new Writer().string(5, 'x').buffer(), list.subarray(4)]),
    'runtime.Unknown',
    5,
  );
});

it('never looks inside an omitted member: what it holds, known or not, is skipped by its length', () => {
  const body = encodeNodeList([
    encodeNode(bare, { status: (w) => w.message(8, (i) => i.string(9, 'from a newer Kubernetes')) }),
  ]);
  assert.deepEqual(decode(body, [], OMIT).items, [omitted(bare)]);
  assert.throws(() => decode(body), ProtobufUnknownFieldError);
});

it('refuses a body cut short, wherever it is cut, rather than giving a partial list', () => {
  const body = encodeNodeList([busy, bare], listMeta);
  // The envelope's last 4 bytes are its empty contentEncoding and contentType: optional,
  // so a body without them is whole. Any cut before them is not.
  for (let end = 0; end < body.length - 4; end++)
    assert.throws(() => decode(body.subarray(0, end)), ProtobufDecodeError, `cut at ${String(end)}`);
  assert.throws(() => decode(body.subarray(0, body.length - 1)), /ended early|cut short/);
});

it('refuses what is not a NodeList in protobuf', () => {
  assert.throws(() => decode(Buffer.from('{"items":[]}')), /not a Kubernetes protobuf body/);
  assert.throws(
    () => decode(encodeNodeList([], {}, 'PodList')),
    /expected a NodeList, the server sent a PodList/,
  );
  const withNodeLength = (length: number) => {
    const list = new Writer().tag(2, 2).varint(length).bytes;
    const envelope = new Writer()
      .message(1, (t) => t.string(1, 'v1').string(2, 'NodeList'))
      .raw(2, list)
      .buffer();
    return Buffer.concat([Buffer.from('k8s\0', 'latin1'), envelope]);
  };
  // An item longer than the list that holds it.
  assert.throws(() => decode(withNodeLength(1000)), ProtobufDecodeError);
});

it('reads a refusal (a Status) in protobuf as its JSON', () => {
  const status = new Writer()
    .message(1, () => undefined)
    .string(2, 'Failure')
    .string(3, 'too old resource version: 1 (2)')
    .string(4, 'Expired')
    .int(6, 410);
  const body = Buffer.concat([
    Buffer.from('k8s\0', 'latin1'),
    new Writer()
      .message(1, (t) => t.string(1, 'v1').string(2, 'Status'))
      .raw(2, status.bytes)
      .buffer(),
  ]);
  assert.deepEqual(decodeStatus(body), {
    apiVersion: 'v1',
    kind: 'Status',
    metadata: {},
    status: 'Failure',
    message: 'too old resource version: 1 (2)',
    reason: 'Expired',
    code: 410,
  });
  assert.match(String(decodeStatus(Buffer.from('nope')).message), /unreadable protobuf Status/);
});
