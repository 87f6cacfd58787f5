// The simulator's raw side: methods served without gatehouse's generated messages (as a
// node serves methods gatehouse has no .proto for), and a recorder of the bytes every
// call brings and takes, so that tests can compare at the simulator what a client sent
// through the Talos API gate with what it sent, and what the node answered with what the
// client got.
//
//   MachineService.Hostname      unary: the node's name (gatehouse's protos do not declare it)
//   MachineService.Logs          server stream: `tail_lines` lines of common.Data, then, with
//                                `follow`, one more every 100ms until the client goes
//   MachineService.EtcdRecover   client stream: a snapshot upload of common.Data chunks;
//                                control-plane nodes only, as Talos checks
//
// Messages are encoded by hand from Talos's field numbers (facts of its wire protocol).
import { createHash } from 'node:crypto';
import { BinaryWriter, WireType } from '@bufbuild/protobuf/wire';
import {
  Metadata,
  status as GrpcStatus,
  type sendUnaryData,
  type ServerReadableStream,
  type ServerUnaryCall,
  type ServerWritableStream,
  type ServiceDefinition,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';

/** What the simulator saw of one call: its metadata and every message, as bytes. */
export interface WireRecord {
  path: string;
  /** The caller's metadata, as gRPC delivered it (binary values base64). */
  metadata: Record<string, string[]>;
  requests: Buffer[];
  replies: Buffer[];
}

export type WireRecorder = (record: WireRecord) => void;

/** The node a call is for, as the simulator resolves its `node` metadata. */
export type NodeRole = (node: string | undefined) => Promise<'control-plane' | 'worker' | undefined>;

const identity = (b: Buffer) => b;

/** A length-delimited protobuf field. */
function field(number: number, value: Buffer): Buffer {
  return Buffer.from(new BinaryWriter().tag(number, WireType.LengthDelimited).bytes(value).finish());
}

/** Reads the varint and length-delimited fields of a message (enough for LogsRequest, common.Data). */
export function readFields(bytes: Buffer): Map<number, (number | Buffer)[]> {
  const fields = new Map<number, (number | Buffer)[]>();
  let i = 0;
  const next = () => {
    let value = 0;
    let shift = 1;
    for (;;) {
      const b = bytes[i++];
      if (b === undefined) throw new Error('truncated varint');
      value += (b & 0x7f) * shift;
      if (b < 0x80) return value;
      shift *= 128;
    }
  };
  while (i < bytes.length) {
    const key = next();
    const number = Math.floor(key / 8);
    const type = key & 7;
    let value: number | Buffer;
    if (type === 0) value = next();
    else if (type === 2) {
      const length = next();
      value = bytes.subarray(i, i + length);
      i += length;
    } else throw new Error(`wire type ${String(type)} not read here`);
    fields.set(number, [...(fields.get(number) ?? []), value]);
  }
  return fields;
}

function metadataOf(metadata: Metadata): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [key, values] of Object.entries(metadata.toJSON()))
    out[key] = values.map((v) => (Buffer.isBuffer(v) ? v.toString('base64') : v));
  return out;
}

const method = (path: string, kind: 'unary' | 'server' | 'client') => ({
  path,
  requestStream: kind === 'client',
  responseStream: kind === 'server',
  requestSerialize: identity,
  requestDeserialize: identity,
  responseSerialize: identity,
  responseDeserialize: identity,
});

export const WIRE_METHODS = {
  Hostname: method('/machine.MachineService/Hostname', 'unary'),
  Logs: method('/machine.MachineService/Logs', 'server'),
  EtcdRecover: method('/machine.MachineService/EtcdRecover', 'client'),
} satisfies ServiceDefinition;

/** One line of a simulated service log. */
export function logLine(n: number): Buffer {
  return Buffer.from(`${new Date(0).toISOString()} simulated log line ${String(n)}: ${'x'.repeat(64)}\n`);
}

/** The raw methods, each recording its call when it ends. */
export function wireService(
  roleOf: NodeRole,
  record: WireRecorder = () => undefined,
): UntypedServiceImplementation {
  const nodeOf = (metadata: Metadata) => metadata.get('node')[0]?.toString();
  return {
    Hostname: (call: ServerUnaryCall<Buffer, Buffer>, callback: sendUnaryData<Buffer>) => {
      const node = nodeOf(call.metadata);
      const reply = field(1, field(2, Buffer.from(node ?? 'talos-simulator')));
      record({
        path: WIRE_METHODS.Hostname.path,
        metadata: metadataOf(call.metadata),
        requests: [call.request],
        replies: [reply],
      });
      callback(null, reply);
    },
    Logs: (call: ServerWritableStream<Buffer, Buffer>) => {
      const request = readFields(call.request);
      const tail = Number(request.get(5)?.[0] ?? 0) || 100;
      const follow = Number(request.get(4)?.[0] ?? 0) === 1;
      const replies: Buffer[] = [];
      let n = 0;
      let ended = false;
      const send = () => {
        const reply = field(2, logLine(n++));
        replies.push(reply);
        return call.write(reply);
      };
      const end = () => {
        if (ended) return;
        ended = true;
        record({
          path: WIRE_METHODS.Logs.path,
          metadata: metadataOf(call.metadata),
          requests: [call.request],
          replies,
        });
      };
      call.on('cancelled', end);
      for (let i = 0; i < tail; i++) send();
      if (!follow) {
        end();
        call.end();
        return;
      }
      const timer = setInterval(() => {
        if (ended) clearInterval(timer);
        else send();
      }, 100);
      call.on('cancelled', () => clearInterval(timer));
    },
    EtcdRecover: (call: ServerReadableStream<Buffer, Buffer>, callback: sendUnaryData<Buffer>) => {
      const requests: Buffer[] = [];
      call.on('data', (chunk: Buffer) => requests.push(chunk));
      call.on('end', () => {
        void roleOf(nodeOf(call.metadata)).then((role) => {
          const reply = field(1, Buffer.alloc(0));
          record({
            path: WIRE_METHODS.EtcdRecover.path,
            metadata: metadataOf(call.metadata),
            requests,
            replies: role === 'control-plane' ? [reply] : [],
          });
          if (role === 'control-plane') callback(null, reply);
          else
            callback({
              code: GrpcStatus.FAILED_PRECONDITION,
              details: 'etcd recover is only supported on control plane nodes',
            });
        });
      });
    },
  };
}

/** sha256 of bytes, for comparing large streams in assertions. */
export function digest(chunks: readonly Buffer[]): string {
  const hash = createHash('sha256');
  for (const c of chunks) hash.update(c);
  return hash.digest('hex');
}
