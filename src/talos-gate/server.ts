// The Talos API gate: an HTTP/2 server over mutual TLS that speaks the Talos API. Each
// call is judged by who makes it (the certificate gatehouse issued: user, Talos roles,
// Kubernetes groups) and what it is (methods.ts): a call the caller's roles do not allow
// is refused; a call that is not gated is forwarded to apid byte for byte (wire.ts),
// never waiting on the controller; a gated call becomes an External NodeAction of the
// caller and passes once it is Approved (decide.ts), claimed so that it passes once.
//
// A held call is answered within `holdMs` (1.5s by default): at once when its action is
// Approved by then, otherwise with FAILED_PRECONDITION whose message names the action,
// what holds it and what to do (held.ts) — the same command passes once it is Approved.
// The machine configuration of an ApplyConfiguration is only ever in memory, for the
// length of the call; the gate logs methods, nodes and callers, never a request.
import { X509Certificate } from 'node:crypto';
import http2, {
  type Http2SecureServer,
  type IncomingHttpHeaders,
  type ServerHttp2Session,
  type ServerHttp2Stream,
} from 'node:http2';
import type { AddressInfo } from 'node:net';
import type { RestClient } from '../kube/rest.ts';
import type { Logger } from '../log.ts';
import { Authorizer, type Caller } from '../http/auth.ts';
import { talosVersionFromOsImage } from '../talos/version.ts';
import { errorMessage, sleep } from '../wait.ts';
import { findNode } from './actions.ts';
import { appendToReply, heldEntries, narrowed, planFanOut } from './fan-out.ts';
import { Holder } from './hold.ts';
import { classifyCall, Code, memberHex, RequestDecodeError, type Classification } from './classify.ts';
import { madeByGate, type GatedCall } from './decide.ts';
import { heldMessage } from './held.ts';
import { methodFacts, mayCall } from './methods.ts';
import { subjectOf } from './pki.ts';
import { GATE_CIPHERS, MAX_FRAME, STREAM_WINDOW, type Upstream } from './upstream.ts';
import {
  answerStatus,
  join,
  metadataValues,
  metadataOf,
  readFirstMessage,
  RequestReadError,
} from './wire.ts';

export interface TalosGateOptions {
  /** The Kubernetes API, as the gate's own identity (the controller's ServiceAccount). */
  rest: RestClient;
  upstream: Upstream;
  /** PEM: the gate's serving certificate and key, and the CA whose client certificates it accepts. */
  tls: { cert: string; key: string; clientCa: string };
  host?: string;
  port?: number;
  /** How long a held call waits for its action before it is answered (default 1500ms). */
  holdMs?: number;
  /** deadlines.approved of the actions the gate creates: how long an approval waits for the repeated call (default 15m). */
  approvedDeadline?: string;
  /** The controller instance whose budgets the gate's actions count against. */
  instance?: string;
  /** Largest request message the gate reads (a machine configuration); default 16 MiB. */
  maxRequestBytes?: number;
  log: Logger;
  /** How often a held call looks at its action again (default 250ms). */
  pollMs?: number;
}

/** Who is calling, from the certificate the gate issued. */
export interface GateCaller extends Caller {
  roles: string[];
  notAfter: Date;
}

/** The caller named by a verified client certificate. */
export function callerOf(cert: X509Certificate): GateCaller {
  const subject = subjectOf(cert);
  return {
    username: subject.commonName,
    groups: subject.organizationalUnits,
    roles: subject.organizations,
    notAfter: cert.validToDate,
  };
}

/** The caller's deadline from `grpc-timeout` (e.g. `5S`, `250m`), as a time; undefined without one. */
export function callDeadline(headers: IncomingHttpHeaders, now: number): number | undefined {
  const match = /^(\d{1,8})([HMSmun])$/.exec(String(headers['grpc-timeout'] ?? ''));
  if (!match) return undefined;
  const unit = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 0.001, n: 0.000001 }[match[2] as 'H'];
  return now + Number(match[1]) * unit;
}

const method = (path: string) => path.replace(/^\/machine\./, '').replace(/^\//, '');

export class TalosGate {
  private readonly options: Required<Omit<TalosGateOptions, 'instance' | 'host' | 'port'>> &
    Pick<TalosGateOptions, 'instance'>;
  private readonly server: Http2SecureServer;
  private readonly authorizer: Authorizer;
  private readonly holder: Holder;
  private readonly callers = new WeakMap<ServerHttp2Session, GateCaller>();
  private readonly host: string;

  private constructor(options: TalosGateOptions) {
    this.options = {
      holdMs: 1500,
      approvedDeadline: '15m',
      maxRequestBytes: 16 * 1024 * 1024,
      pollMs: 250,
      ...options,
    };
    this.host = options.host ?? '127.0.0.1';
    this.authorizer = new Authorizer({ rest: options.rest, log: options.log });
    this.holder = new Holder({
      rest: options.rest,
      authorizer: this.authorizer,
      log: options.log,
      approvedDeadline: this.options.approvedDeadline,
      instance: options.instance,
    });
    this.server = http2.createSecureServer({
      cert: options.tls.cert,
      key: options.tls.key,
      ca: options.tls.clientCa,
      // Only certificates the gate's CA signed, and still valid, get a session at all.
      requestCert: true,
      rejectUnauthorized: true,
      ciphers: GATE_CIPHERS,
      honorCipherOrder: true,
      settings: { initialWindowSize: STREAM_WINDOW, maxFrameSize: MAX_FRAME },
    });
    this.server.on('session', (session) => session.setLocalWindowSize(STREAM_WINDOW * 4));
    this.server.on('stream', (stream, headers) => {
      this.handle(stream, headers).catch((error: unknown) => {
        this.options.log.error(
          { err: errorMessage(error), path: headers[':path'] },
          'talos gate: call failed',
        );
        answerStatus(stream, Code.INTERNAL, `talos gate: ${errorMessage(error)}`);
      });
    });
  }

  static async start(options: TalosGateOptions): Promise<TalosGate> {
    const gate = new TalosGate(options);
    await new Promise<void>((resolve, reject) => {
      gate.server.once('error', reject);
      gate.server.listen(options.port ?? 0, gate.host, () => resolve());
    });
    return gate;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  /** host:port, as a talosconfig lists endpoints. */
  get endpoint(): string {
    return `${this.host}:${String(this.port)}`;
  }

  async stop(): Promise<void> {
    this.options.upstream.close();
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      // Streams held open by clients (a `logs --follow`) end with the process.
      for (const session of this.sessions) session.destroy();
    });
  }

  private readonly sessions = new Set<ServerHttp2Session>();

  private caller(session: ServerHttp2Session): GateCaller | undefined {
    let caller = this.callers.get(session);
    if (caller) return caller;
    this.sessions.add(session);
    session.once('close', () => this.sessions.delete(session));
    const socket = session.socket as unknown as {
      getPeerX509Certificate?: () => X509Certificate | undefined;
    };
    const cert = socket.getPeerX509Certificate?.();
    if (!cert) return undefined;
    caller = callerOf(cert);
    this.callers.set(session, caller);
    return caller;
  }

  /** When each call arrived (its headers object is the key: one per stream). */
  private readonly arrivals = new WeakMap<IncomingHttpHeaders, number>();

  private async handle(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): Promise<void> {
    this.arrivals.set(headers, Date.now());
    const path = headers[':path'] ?? '';
    if (headers[':method'] !== 'POST' || !(headers['content-type'] ?? '').startsWith('application/grpc')) {
      answerStatus(
        stream,
        Code.UNIMPLEMENTED,
        'talos gate: only gRPC calls (POST, application/grpc) are served',
      );
      return;
    }
    const caller = this.caller(stream.session as ServerHttp2Session);
    if (!caller?.username) {
      answerStatus(
        stream,
        Code.UNAUTHENTICATED,
        'talos gate: the client certificate names no user (CN): get one with gatehouse talosconfig',
      );
      return;
    }
    if (caller.notAfter.getTime() <= Date.now()) {
      answerStatus(
        stream,
        Code.UNAUTHENTICATED,
        `talos gate: the certificate of ${caller.username} expired at ${caller.notAfter.toISOString()}: get a new one with gatehouse talosconfig`,
      );
      return;
    }
    // Talos trusts this metadata only from its impersonator role; the gate never passes it on.
    if (headers['talos-role'] !== undefined) {
      answerStatus(
        stream,
        Code.PERMISSION_DENIED,
        'talos gate: the talos-role metadata is Talos-internal and is not accepted from callers',
      );
      return;
    }
    const facts = methodFacts(path);
    if (!mayCall(caller.roles, path)) {
      answerStatus(
        stream,
        Code.PERMISSION_DENIED,
        `talos gate: ${caller.username} (roles ${caller.roles.join(', ') || 'none'}) may not call ${method(path)}: it needs one of ${facts.roles.join(', ')}; ask for a certificate with such a role (gatehouse talosconfig --role …, if RBAC grants it to you)`,
      );
      return;
    }
    if (facts.gating.gated === false) {
      await this.forward(stream, headers, path);
      return;
    }
    await this.gated(stream, headers, path, caller);
  }

  private async forward(
    stream: ServerHttp2Stream,
    headers: IncomingHttpHeaders,
    path: string,
    firstBytes?: Buffer,
  ): Promise<void> {
    let upstream;
    try {
      upstream = await this.options.upstream.open(path, metadataOf(headers));
    } catch (error) {
      answerStatus(stream, Code.UNAVAILABLE, `talos gate: ${errorMessage(error)}`);
      return;
    }
    await join(stream, upstream, firstBytes);
  }

  private async gated(
    stream: ServerHttp2Stream,
    headers: IncomingHttpHeaders,
    path: string,
    caller: GateCaller,
  ): Promise<void> {
    let raw: Buffer;
    let message: Buffer;
    try {
      ({ raw, message } = await readFirstMessage(stream, headers, this.options.maxRequestBytes));
    } catch (error) {
      if (error instanceof RequestReadError) answerStatus(stream, error.code, error.message);
      else throw error;
      return;
    }
    const single = metadataValues(headers, 'node');
    const fanOut = metadataValues(headers, 'nodes');
    const targets = single.length > 0 ? single : fanOut;
    if (targets.length === 0) {
      answerStatus(
        stream,
        Code.FAILED_PRECONDITION,
        `talos gate: ${method(path)} is gated per node: name the node (talosctl -n <node>)`,
      );
      return;
    }
    if (single.length === 0) {
      await this.fanOut(stream, headers, path, raw, message, caller, fanOut);
      return;
    }
    const target = targets[0] as string;
    const node = await findNode(this.options.rest, target);
    if (!node) {
      answerStatus(
        stream,
        Code.FAILED_PRECONDITION,
        `talos gate: no Kubernetes Node has the address or name ${target}: the gate gates the nodes of its own cluster only`,
      );
      return;
    }
    const version = talosVersionFromOsImage(node.status?.nodeInfo?.osImage);
    const running = await this.runningConfiguration(path, target);
    let classification: Classification;
    try {
      classification = classifyCall(path, message, version, running);
    } catch (error) {
      if (!(error instanceof RequestDecodeError)) throw error;
      answerStatus(stream, Code.INVALID_ARGUMENT, `talos gate: ${error.message}`);
      return;
    }
    const log = this.options.log.child({
      caller: caller.username,
      node: node.metadata.name,
      call: method(path),
    });
    switch (classification.kind) {
      case 'forward':
        log.info({ why: classification.why }, 'talos gate: gated method passes in this form');
        await this.forward(stream, headers, path, raw);
        return;
      case 'refuse':
        answerStatus(stream, classification.code, classification.message);
        return;
      case 'etcd-remove': {
        const owner = await this.memberNode(stream, target, classification.memberId);
        if (owner === 'answered') return;
        if (owner === undefined) {
          // No member by that ID: Talos answers NotFound, and nothing changes.
          await this.forward(stream, headers, path, raw);
          return;
        }
        if (owner.node === undefined) {
          // A member of no Node (its machine gone): removing it lets etcd count a healthy
          // quorum again, a judgement the action kinds cannot make for a node that is not there.
          const allowed = await this.authorizer.decide(caller, { verb: 'bypass', resource: 'nodeactions' });
          if (!allowed.allowed) {
            answerStatus(
              stream,
              Code.PERMISSION_DENIED,
              `talos gate: ${classification.call} is ${owner.hostname}'s, which is no Node of this cluster: removing a member whose node is gone is for holders of the verb bypass on nodeactions.talos.dev (ClusterRole gatehouse:bypass); for a node still there, it is an EtcdLeave of that node`,
            );
            return;
          }
          log.warn(
            { member: owner.hostname },
            'talos gate: removal of a member of no Node forwarded for a bypass holder',
          );
          await this.forward(stream, headers, path, raw);
          return;
        }
        const call: GatedCall = {
          caller: caller.username,
          node: owner.node,
          ask: { action: 'EtcdLeave' },
          step: 'disrupt',
        };
        await this.hold(
          stream,
          headers,
          path,
          raw,
          caller,
          call,
          `${classification.call} of ${owner.node}`,
          log,
        );
        return;
      }
      case 'gate':
        break;
    }
    const call: GatedCall = {
      caller: caller.username,
      node: node.metadata.name,
      ask: classification.ask,
      step: classification.step,
    };
    await this.hold(stream, headers, path, raw, caller, call, classification.call, log);
  }

  /**
   * The configuration the node runs, for an ApplyConfiguration's disruption class
   * (classify.ts): read through the gate's own Talos client, in memory only. Undefined for
   * other calls, or when it cannot be read (then the class is the most the mode allows).
   */
  private async runningConfiguration(path: string, target: string): Promise<string | undefined> {
    if (methodFacts(path).gating.gated !== 'ConfigChange') return undefined;
    try {
      return await this.options.upstream
        .talosClient()
        .machineConfiguration({ node: target, timeoutMs: 10_000 });
    } catch (error) {
      this.options.log.warn(
        { node: target, err: error instanceof Error ? error.message : String(error) },
        'talos gate: could not read the node configuration to classify the change',
      );
      return undefined;
    }
  }

  /** A gated call to several nodes (fan-out.ts): each node gated on its own. */
  private async fanOut(
    stream: ServerHttp2Stream,
    headers: IncomingHttpHeaders,
    path: string,
    raw: Buffer,
    message: Buffer,
    caller: GateCaller,
    targets: string[],
  ): Promise<void> {
    const created = new Set<string>();
    const connection = { gone: false };
    stream.once('close', () => (connection.gone = true));
    const plan = await planFanOut(
      {
        holder: this.holder,
        findNode: (target) => findNode(this.options.rest, target),
        holdUntil: this.holdUntil(headers),
        pollMs: this.options.pollMs,
        log: this.options.log,
        gone: () => connection.gone,
      },
      headers,
      message,
      caller,
      targets,
      created,
    );
    if (plan.kind === 'gone') {
      await this.holder.cancel(created);
      return;
    }
    if (plan.kind === 'answer') {
      answerStatus(stream, plan.code, plan.message);
      return;
    }
    let upstream;
    try {
      upstream = await this.options.upstream.open(path, narrowed(metadataOf(headers), plan.nodes));
    } catch (error) {
      answerStatus(stream, Code.UNAVAILABLE, `talos gate: ${errorMessage(error)}`);
      return;
    }
    const extra = heldEntries(plan.held);
    await join(stream, upstream, raw, (reply) => appendToReply(reply, extra));
  }

  /**
   * Whose member `id` is, asked of etcd through `target` with gatehouse's credentials: its
   * hostname and the Node of that name or address (undefined: no such Node), undefined when
   * no member has the ID, or 'answered' when etcd could not be asked (the caller was told).
   */
  private async memberNode(
    stream: ServerHttp2Stream,
    target: string,
    id: bigint,
  ): Promise<{ hostname: string; node: string | undefined } | undefined | 'answered'> {
    let members;
    try {
      members = await this.options.upstream.talosClient().etcdMemberList({ node: target });
    } catch (error) {
      answerStatus(
        stream,
        Code.UNAVAILABLE,
        `talos gate: cannot list the etcd members through ${target} to tell whose member ${memberHex(id)} is: ${errorMessage(error)}`,
      );
      return 'answered';
    }
    const member = members.find((m) => m.id === id);
    if (!member) return undefined;
    const node = await findNode(this.options.rest, member.hostname);
    return { hostname: member.hostname, node: node?.metadata.name };
  }

  /** When a held call is answered: after holdMs, and before the caller's own deadline. */
  private holdUntil(headers: IncomingHttpHeaders): number {
    // Counted from the call's arrival (reading it, finding the node, creating its action
    // all count), so the answer comes within holdMs and one last look.
    const arrived = this.arrivals.get(headers) ?? Date.now();
    return Math.min(arrived + this.options.holdMs, (callDeadline(headers, arrived) ?? Infinity) - 200);
  }

  /** Waits (up to holdMs, within the caller's deadline) for the call's action to be Approved, then forwards it once. */
  private async hold(
    stream: ServerHttp2Stream,
    headers: IncomingHttpHeaders,
    path: string,
    raw: Buffer,
    caller: GateCaller,
    call: GatedCall,
    description: string,
    log: Logger,
  ): Promise<void> {
    const deadline = this.holdUntil(headers);
    const created = new Set<string>();
    const connection = { gone: false };
    stream.once('close', () => (connection.gone = true));
    for (;;) {
      if (connection.gone) {
        await this.holder.cancel(created);
        return;
      }
      const look = await this.holder.look(caller, call, description, created);
      if (look.kind === 'denied') {
        answerStatus(stream, Code.PERMISSION_DENIED, look.message);
        return;
      }
      if (look.kind === 'ready') {
        if (!(await this.holder.claim(look))) continue;
        log.info(
          { action: look.action.metadata.name, claim: Object.keys(look.claim) },
          'talos gate: approved call forwarded',
        );
        await this.forward(stream, headers, path, raw);
        return;
      }
      if (Date.now() >= deadline) {
        log.info(
          {
            action: look.action.metadata.name,
            phase: look.action.status?.phase,
            madeByGate: madeByGate(look.action),
          },
          'talos gate: call held',
        );
        answerStatus(stream, Code.FAILED_PRECONDITION, heldMessage(look.action, description, call.node));
        return;
      }
      await Promise.race([sleep(this.options.pollMs), new Promise((r) => stream.once('close', r))]);
    }
  }
}
