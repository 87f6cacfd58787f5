// A test-only protobuf encoder for NodeLists, written from generated.proto independently of
// the decoder's tables, that writes as the API server's Go marshaller does: every non-pointer
// scalar on the wire, empty or not. Its input is a Node as the API server's JSON has it, so
// what the decoder gives back must deep-equal that input.
import fc from 'fast-check';

type Json = Record<string, unknown>;

const VARINT = 0;
const LEN = 2;

/** Appends protobuf to a byte array. */
export class Writer {
  readonly bytes: number[] = [];

  varint(value: number | bigint): this {
    let v = BigInt.asUintN(64, BigInt(value));
    while (v >= 0x80n) {
      this.bytes.push(Number(v & 0x7fn) | 0x80);
      v >>= 7n;
    }
    this.bytes.push(Number(v));
    return this;
  }

  tag(field: number, wire: number): this {
    return this.varint((field << 3) | wire);
  }

  int(field: number, value: number | bigint): this {
    return this.tag(field, VARINT).varint(value);
  }

  raw(field: number, bytes: Uint8Array | number[]): this {
    this.tag(field, LEN).varint(bytes.length);
    for (const b of bytes) this.bytes.push(b);
    return this;
  }

  string(field: number, value: string): this {
    return this.raw(field, Buffer.from(value, 'utf8'));
  }

  message(field: number, build: (w: Writer) => void): this {
    const inner = new Writer();
    build(inner);
    return this.raw(field, inner.bytes);
  }

  buffer(): Buffer {
    return Buffer.from(this.bytes);
  }
}

const str = (v: unknown): string => (typeof v === 'string' ? v : '');
const obj = (v: unknown): Json => (typeof v === 'object' && v !== null ? (v as Json) : {});
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);

/** metav1.Time: empty when zero (null), else whole seconds. */
function time(w: Writer, field: number, value: unknown): void {
  w.message(field, (t) => {
    if (typeof value === 'string') t.int(1, Date.parse(value) / 1000).int(2, 0);
  });
}

function stringMap(w: Writer, field: number, map: unknown, quantity = false): void {
  for (const [k, v] of Object.entries(obj(map)))
    w.message(field, (e) => {
      e.string(1, k);
      if (quantity) e.message(2, (q) => q.string(1, str(v)));
      else e.string(2, str(v));
    });
}

function objectMeta(w: Writer, m: Json): void {
  w.string(1, str(m.name)).string(2, str(m.generateName)).string(3, str(m.namespace)).string(4, '');
  w.string(5, str(m.uid))
    .string(6, str(m.resourceVersion))
    .int(7, (m.generation as number | undefined) ?? 0);
  time(w, 8, m.creationTimestamp);
  if (m.deletionTimestamp !== undefined) time(w, 9, m.deletionTimestamp);
  if (m.deletionGracePeriodSeconds !== undefined) w.int(10, m.deletionGracePeriodSeconds as number);
  stringMap(w, 11, m.labels);
  stringMap(w, 12, m.annotations);
  for (const o of arr(m.ownerReferences).map(obj))
    w.message(13, (r) => {
      r.string(1, str(o.kind)).string(3, str(o.name)).string(4, str(o.uid)).string(5, str(o.apiVersion));
      if (o.controller !== undefined) r.int(6, o.controller ? 1 : 0);
      if (o.blockOwnerDeletion !== undefined) r.int(7, o.blockOwnerDeletion ? 1 : 0);
    });
  for (const f of arr(m.finalizers)) w.string(14, str(f));
  for (const e of arr(m.managedFields).map(obj))
    w.message(17, (f) => {
      f.string(1, str(e.manager)).string(2, str(e.operation)).string(3, str(e.apiVersion));
      if (e.time !== undefined) time(f, 4, e.time);
      f.string(6, str(e.fieldsType));
      if (e.fieldsV1 !== undefined) f.message(7, (v) => v.string(1, JSON.stringify(e.fieldsV1)));
      f.string(8, str(e.subresource));
    });
}

function nodeSpec(w: Writer, s: Json): void {
  w.string(1, str(s.podCIDR)).string(2, str(s.externalID)).string(3, str(s.providerID));
  w.int(4, s.unschedulable ? 1 : 0);
  for (const t of arr(s.taints).map(obj))
    w.message(5, (m) => {
      m.string(1, str(t.key)).string(2, str(t.value)).string(3, str(t.effect));
      if (t.timeAdded !== undefined) time(m, 4, t.timeAdded);
    });
  for (const c of arr(s.podCIDRs)) w.string(7, str(c));
}

function nodeStatus(w: Writer, s: Json): void {
  stringMap(w, 1, s.capacity, true);
  stringMap(w, 2, s.allocatable, true);
  w.string(3, str(s.phase));
  for (const c of arr(s.conditions).map(obj))
    w.message(4, (m) => {
      m.string(1, str(c.type)).string(2, str(c.status));
      time(m, 3, c.lastHeartbeatTime);
      time(m, 4, c.lastTransitionTime);
      m.string(5, str(c.reason)).string(6, str(c.message));
    });
  for (const a of arr(s.addresses).map(obj))
    w.message(5, (m) => m.string(1, str(a.type)).string(2, str(a.address)));
  const port = obj(obj(s.daemonEndpoints).kubeletEndpoint).Port;
  w.message(6, (d) => d.message(1, (e) => e.int(1, (port as number | undefined) ?? 0)));
  const info = obj(s.nodeInfo);
  w.message(7, (m) => {
    const names = ['machineID', 'systemUUID', 'bootID', 'kernelVersion', 'osImage'];
    const more = [
      'containerRuntimeVersion',
      'kubeletVersion',
      'kubeProxyVersion',
      'operatingSystem',
      'architecture',
    ];
    [...names, ...more].forEach((name, i) => m.string(i + 1, str(info[name])));
  });
  for (const image of arr(s.images).map(obj))
    w.message(8, (m) => {
      for (const n of arr(image.names)) m.string(1, str(n));
      m.int(2, (image.sizeBytes as number | undefined) ?? 0);
    });
  for (const v of arr(s.volumesInUse)) w.string(9, str(v));
  for (const v of arr(s.volumesAttached).map(obj))
    w.message(10, (m) => m.string(1, str(v.name)).string(2, str(v.devicePath)));
}

/** A Node's bytes; `extra` adds fields at the end of a message (for unknown-field tests). */
export function encodeNode(node: Json, extra: { status?: (w: Writer) => void } = {}): number[] {
  const w = new Writer();
  w.message(1, (m) => objectMeta(m, obj(node.metadata)));
  w.message(2, (m) => nodeSpec(m, obj(node.spec)));
  w.message(3, (m) => {
    nodeStatus(m, obj(node.status));
    extra.status?.(m);
  });
  return w.bytes;
}

/** A whole NodeList response body: magic, runtime.Unknown, NodeList. */
export function encodeNodeList(
  nodes: (Json | number[])[],
  metadata: { resourceVersion?: string; continue?: string; remainingItemCount?: number } = {},
  kind = 'NodeList',
): Buffer {
  const list = new Writer();
  list.message(1, (m) => {
    m.string(1, '')
      .string(2, metadata.resourceVersion ?? '')
      .string(3, metadata.continue ?? '');
    if (metadata.remainingItemCount !== undefined) m.int(4, metadata.remainingItemCount);
  });
  for (const node of nodes) list.raw(2, Array.isArray(node) ? node : encodeNode(node));
  const envelope = new Writer();
  envelope.message(1, (t) => t.string(1, 'v1').string(2, kind));
  envelope.raw(2, list.bytes);
  envelope.string(3, '').string(4, '');
  return Buffer.concat([Buffer.from('k8s\0', 'latin1'), envelope.buffer()]);
}

// Nodes as the API server's JSON has them (omitempty applied), for property tests.

const token = fc.stringMatching(/^[a-z0-9]([-a-z0-9.]{0,14}[a-z0-9])?$/);
const anyText = fc.string({ unit: 'grapheme', maxLength: 40 });
const seconds = fc.integer({ min: 0, max: 4_000_000_000 });
const rfc3339 = seconds.map((s) => new Date(s * 1000).toISOString().replace('.000Z', 'Z'));

/** Sets `key` when `value` is not what omitempty leaves out. */
function put(into: Json, key: string, value: unknown): Json {
  if (value !== '' && value !== 0 && value !== false && value !== undefined) into[key] = value;
  return into;
}

const taint = fc
  .record({
    key: token,
    value: fc.oneof(fc.constant(''), token),
    effect: token,
    timeAdded: fc.option(rfc3339),
  })
  .map((t) => {
    const out = put({ key: t.key, effect: t.effect }, 'value', t.value);
    if (t.timeAdded !== null) out.timeAdded = t.timeAdded;
    return out;
  });

const condition = fc
  .record({
    type: token,
    status: fc.constantFrom('True', 'False', 'Unknown'),
    lastHeartbeatTime: fc.option(rfc3339),
    lastTransitionTime: fc.option(rfc3339),
    reason: fc.oneof(fc.constant(''), token),
    message: anyText,
  })
  .map(({ reason, message, ...c }) => put(put({ ...c }, 'reason', reason), 'message', message));

const owner = fc
  .record({
    apiVersion: token,
    kind: token,
    name: token,
    uid: fc.uuid(),
    controller: fc.option(fc.boolean()),
    blockOwnerDeletion: fc.option(fc.boolean()),
  })
  .map(({ controller, blockOwnerDeletion, ...o }) => ({
    ...o,
    ...(controller !== null ? { controller } : {}),
    ...(blockOwnerDeletion !== null ? { blockOwnerDeletion } : {}),
  }));

const map = (values: fc.Arbitrary<string>) => fc.dictionary(token, values, { maxKeys: 6 });
const list = <T>(of: fc.Arbitrary<T>) => fc.array(of, { maxLength: 4 });

/** A Node as served in JSON (no managedFields: the test adds them where it needs them). */
export const arbitraryNode: fc.Arbitrary<Json> = fc
  .record({
    name: token,
    uid: fc.uuid(),
    resourceVersion: fc.integer({ min: 1, max: 2 ** 40 }).map(String),
    generation: fc.oneof(fc.constant(0), fc.maxSafeInteger(), fc.integer({ min: -5, max: 5 })),
    creationTimestamp: fc.option(rfc3339),
    deletionTimestamp: fc.option(rfc3339),
    labels: map(fc.oneof(fc.constant(''), token)),
    annotations: map(anyText),
    ownerReferences: list(owner),
    finalizers: list(token),
    podCIDR: fc.oneof(fc.constant(''), fc.constant('10.244.0.0/24')),
    providerID: fc.oneof(fc.constant(''), token),
    unschedulable: fc.boolean(),
    taints: list(taint),
    capacity: map(fc.constantFrom('4', '16Gi', '110', '100m')),
    phase: fc.constantFrom('', 'Running'),
    conditions: list(condition),
    addresses: list(fc.record({ type: token, address: token })),
    port: fc.integer({ min: 0, max: 65535 }),
    nodeInfo: fc.record({
      bootID: fc.oneof(fc.constant(''), fc.uuid()),
      osImage: anyText,
      kubeletVersion: token,
    }),
    images: list(
      fc
        .record({ names: list(token), sizeBytes: fc.nat() })
        .map((i) => put(i.names.length > 0 ? { names: i.names } : {}, 'sizeBytes', i.sizeBytes)),
    ),
    volumesInUse: list(token),
  })
  .map((n) => {
    const metadata = put({}, 'name', n.name);
    put(metadata, 'uid', n.uid);
    put(metadata, 'resourceVersion', n.resourceVersion);
    put(metadata, 'generation', n.generation);
    if (n.creationTimestamp !== null) metadata.creationTimestamp = n.creationTimestamp;
    if (n.deletionTimestamp !== null) metadata.deletionTimestamp = n.deletionTimestamp;
    for (const key of ['labels', 'annotations', 'ownerReferences', 'finalizers'] as const)
      if (Object.keys(n[key]).length > 0) metadata[key] = n[key];
    const spec = put(
      put(put({}, 'podCIDR', n.podCIDR), 'providerID', n.providerID),
      'unschedulable',
      n.unschedulable,
    );
    if (n.taints.length > 0) spec.taints = n.taints;
    const status: Json = put({}, 'phase', n.phase);
    if (Object.keys(n.capacity).length > 0) status.capacity = status.allocatable = n.capacity;
    for (const key of ['conditions', 'addresses', 'images', 'volumesInUse'] as const)
      if (n[key].length > 0) status[key] = n[key];
    status.daemonEndpoints = { kubeletEndpoint: { Port: n.port } };
    status.nodeInfo = {
      machineID: '',
      systemUUID: '',
      kernelVersion: '',
      containerRuntimeVersion: '',
      kubeProxyVersion: '',
      operatingSystem: 'linux',
      architecture: 'amd64',
      ...n.nodeInfo,
    };
    return { metadata, spec, status };
  });
