// A gated call that names several nodes (`nodes` metadata, apid's fan-out): each node is
// gated on its own. The call waits (up to the hold) for every node's action; then it is
// forwarded to the nodes whose action is Approved — the `nodes` metadata narrowed to them —
// and the reply gets, for each node still held, an entry of the kind apid writes for a
// node that failed (common.Metadata with hostname, error and status), saying what holds
// it. talosctl prints those per node; running the command again for them passes once
// their actions are Approved. Nothing passes when no node is Approved yet.
import { create, toBinary } from '@bufbuild/protobuf';
import { BinaryWriter, WireType } from '@bufbuild/protobuf/wire';
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http2';
import { gunzipSync } from 'node:zlib';
import type { Logger } from '../log.ts';
import { MetadataSchema } from '../talos/gen/gatehouse/talos/common_pb.ts';
import { talosVersionFromOsImage } from '../talos/version.ts';
import type { NodeObject } from './actions.ts';
import { classifyCall, Code, RequestDecodeError } from './classify.ts';
import type { GatedCall } from './decide.ts';
import { heldMessage } from './held.ts';
import type { Holder, Look } from './hold.ts';
import type { Caller } from '../http/auth.ts';

export interface FanOutContext {
  holder: Holder;
  findNode: (target: string) => Promise<NodeObject | undefined>;
  /** When the held nodes are answered for. */
  holdUntil: number;
  pollMs: number;
  log: Logger;
  /** Whether the caller went away meanwhile. */
  gone: () => boolean;
}

export type FanOutPlan =
  | { kind: 'answer'; code: number; message: string }
  | { kind: 'forward'; nodes: string[]; held: { node: string; message: string }[] }
  | { kind: 'gone' };

/** A length-delimited field 1 holding `value`. */
const fieldOne = (value: Uint8Array) =>
  Buffer.from(new BinaryWriter().tag(1, WireType.LengthDelimited).bytes(value).finish());

/**
 * The reply entries for held nodes: in every Talos reply to a gated unary call the
 * messages are field 1 (`repeated X messages = 1`) and each X's field 1 is its
 * common.Metadata, so these bytes append to any of them.
 */
export function heldEntries(held: readonly { node: string; message: string }[]): Buffer {
  return Buffer.concat(
    held.map((h) =>
      fieldOne(
        fieldOne(
          toBinary(
            MetadataSchema,
            create(MetadataSchema, {
              hostname: h.node,
              error: h.message,
              status: { code: Code.FAILED_PRECONDITION, message: h.message },
            }),
          ),
        ),
      ),
    ),
  );
}

/** A unary reply (one gRPC message) with `extra` appended to its message; an empty reply stays empty. */
export function appendToReply(reply: Buffer, extra: Buffer): Buffer {
  if (reply.length < 5 || extra.length === 0) return reply;
  const length = reply.readUInt32BE(1);
  const body = reply.subarray(5, 5 + length);
  const message = Buffer.concat([reply[0] === 1 ? gunzipSync(body) : body, extra]);
  const head = Buffer.alloc(5);
  head.writeUInt32BE(message.length, 1);
  return Buffer.concat([head, message, reply.subarray(5 + length)]);
}

/** The caller's metadata with the fan-out narrowed to `nodes`. */
export function narrowed(metadata: OutgoingHttpHeaders, nodes: readonly string[]): OutgoingHttpHeaders {
  return { ...metadata, nodes: nodes.join(',') };
}

interface Target {
  target: string;
  call?: GatedCall;
  description?: string;
  look?: Look;
}

/** Which nodes a fan-out call may reach now, and what holds the others. */
export async function planFanOut(
  ctx: FanOutContext,
  headers: IncomingHttpHeaders,
  message: Uint8Array,
  caller: Caller,
  targets: readonly string[],
  created: Set<string>,
): Promise<FanOutPlan> {
  const path = headers[':path'] ?? '';
  if (path === '/machine.LifecycleService/Upgrade')
    return {
      kind: 'answer',
      code: Code.FAILED_PRECONDITION,
      message: `talos gate: LifecycleService.Upgrade streams; call each node on its own (talosctl -n <node>) so that each passes when its own action is approved`,
    };
  const nodes: Target[] = [];
  for (const target of targets) {
    const node = await ctx.findNode(target);
    if (!node)
      return {
        kind: 'answer',
        code: Code.FAILED_PRECONDITION,
        message: `talos gate: no Kubernetes Node has the address or name ${target}: the gate gates the nodes of its own cluster only`,
      };
    let c;
    try {
      c = classifyCall(path, message, talosVersionFromOsImage(node.status?.nodeInfo?.osImage));
    } catch (error) {
      if (error instanceof RequestDecodeError)
        return { kind: 'answer', code: Code.INVALID_ARGUMENT, message: `talos gate: ${error.message}` };
      throw error;
    }
    if (c.kind === 'refuse') return { kind: 'answer', code: c.code, message: c.message };
    if (c.kind === 'etcd-remove')
      return {
        kind: 'answer',
        code: Code.FAILED_PRECONDITION,
        message: `talos gate: ${c.call} is judged per node: call each node on its own`,
      };
    nodes.push(
      c.kind === 'forward'
        ? { target }
        : {
            target,
            call: { caller: caller.username, node: node.metadata.name, ask: c.ask, step: c.step },
            description: c.call,
          },
    );
  }
  for (;;) {
    if (ctx.gone()) return { kind: 'gone' };
    for (const n of nodes)
      if (n.call && n.look?.kind !== 'ready')
        n.look = await ctx.holder.look(caller, n.call, n.description ?? '', created);
    const denied = nodes.find((n) => n.look?.kind === 'denied');
    if (denied?.look?.kind === 'denied')
      return { kind: 'answer', code: Code.PERMISSION_DENIED, message: denied.look.message };
    const waiting = nodes.some((n) => n.look?.kind === 'wait');
    if (!waiting || Date.now() >= ctx.holdUntil) break;
    await new Promise((r) => setTimeout(r, ctx.pollMs));
  }
  const pass: string[] = [];
  const held: { node: string; message: string }[] = [];
  for (const n of nodes) {
    const look = n.look;
    if (!look) pass.push(n.target);
    else if (look.kind === 'ready' && (await ctx.holder.claim(look))) pass.push(n.target);
    else if (look.kind === 'ready' || look.kind === 'wait')
      held.push({
        node: n.target,
        message: heldMessage(look.action, n.description ?? '', n.call?.node ?? n.target),
      });
  }
  ctx.log.info(
    { caller: caller.username, pass, held: held.map((h) => h.node) },
    'talos gate: fan-out call judged per node',
  );
  if (pass.length === 0)
    return { kind: 'answer', code: Code.FAILED_PRECONDITION, message: held.map((h) => h.message).join('\n') };
  return { kind: 'forward', nodes: pass, held };
}
