// The signer of gate certificates: Kubernetes CertificateSigningRequests with the
// signerName talos.dev/gate. The API server records who asked (spec.username, groups),
// whatever way they authenticated, so `gatehouse talosconfig` works with any kubeconfig;
// the gate approves a request only if RBAC grants that user the Talos role it asks for
// (the verb `os:<role>` on talosapi.talos.dev, SubjectAccessReview as the requester), and
// signs a certificate naming the user (CN), the role (O) and the user's groups (OU), valid
// for at most `maxLifetimeMs`. Any replica may sign: the status write is conditional.
//
// A person who reaches only gatehouse's HTTP API (a bearer token, no kubeconfig) gets
// theirs through it: the controller authenticates the token (TokenReview) and creates the
// request itself, naming the person in the annotation talos.dev/requested-for. The signer
// believes that annotation only on a request made by one of its `delegates` (the
// controller's ServiceAccount), and judges the person named there exactly as above.
import { createPublicKey } from 'node:crypto';
import { GROUP } from '../api/common.ts';
import type { Authorizer, Caller } from '../http/auth.ts';
import { KubeApiError, type RestClient } from '../kube/rest.ts';
import type { Logger } from '../log.ts';
import { errorMessage } from '../wait.ts';
import { TALOS_ROLES } from './methods.ts';
import { issueCertificate, readCertificateRequest, type Authority } from './pki.ts';
import {
  GATE_SIGNER,
  REQUESTED_FOR_ANNOTATION,
  TALOS_API_RESOURCE,
  CSR_PATH,
  roleClusterRole,
  type CertificateSigningRequest,
} from './signing-request.ts';

export type Judgement =
  | { kind: 'skip' }
  | { kind: 'deny'; message: string }
  | { kind: 'check'; caller: Caller; role: string; publicKeyPem: string; lifetimeMs: number };

const strings = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === 'string');

/** The person an annotation names, or why it names no one. */
export function readRequestedFor(text: string): Caller | string {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return `${REQUESTED_FOR_ANNOTATION} is not JSON`;
  }
  if (typeof value !== 'object' || value === null) return `${REQUESTED_FOR_ANNOTATION} is not an object`;
  const v = value as Record<string, unknown>;
  if (typeof v.username !== 'string' || v.username === '')
    return `${REQUESTED_FOR_ANNOTATION} names no username`;
  if (v.groups !== undefined && !strings(v.groups))
    return `${REQUESTED_FOR_ANNOTATION}: groups must be strings`;
  if (v.uid !== undefined && typeof v.uid !== 'string')
    return `${REQUESTED_FOR_ANNOTATION}: uid must be a string`;
  const extra = v.extra;
  if (
    extra !== undefined &&
    (typeof extra !== 'object' || extra === null || !Object.values(extra).every(strings))
  )
    return `${REQUESTED_FOR_ANNOTATION}: extra must map names to lists of strings`;
  return {
    username: v.username,
    groups: v.groups ?? [],
    ...(typeof v.uid === 'string' ? { uid: v.uid } : {}),
    ...(extra ? { extra: extra as Record<string, string[]> } : {}),
  };
}

/** Who a request is for: its maker, or — on a request a delegate made — the person it names. */
function requester(csr: CertificateSigningRequest, delegates: readonly string[]): Caller | string {
  const maker = csr.spec.username ?? '';
  const named = csr.metadata.annotations?.[REQUESTED_FOR_ANNOTATION];
  if (named === undefined)
    return {
      username: maker,
      groups: csr.spec.groups ?? [],
      ...(csr.spec.uid ? { uid: csr.spec.uid } : {}),
      ...(csr.spec.extra ? { extra: csr.spec.extra } : {}),
    };
  if (!delegates.includes(maker))
    return `the request names someone to sign for (${REQUESTED_FOR_ANNOTATION}) but was made by ${maker || 'no one'}: only gatehouse's HTTP API may ask on another's behalf`;
  return readRequestedFor(named);
}

/**
 * What a request asks for and whether it is well-formed; the RBAC question comes after
 * (pure). `delegates`: the users whose requests may name another (the HTTP API's).
 */
export function judgeRequest(
  csr: CertificateSigningRequest,
  maxLifetimeMs: number,
  delegates: readonly string[] = [],
): Judgement {
  if (csr.spec.signerName !== GATE_SIGNER) return { kind: 'skip' };
  const done = (csr.status?.conditions ?? []).some((c) => c.type === 'Denied' || c.type === 'Failed');
  if (done || csr.status?.certificate) return { kind: 'skip' };
  const caller = requester(csr, delegates);
  if (typeof caller === 'string') return { kind: 'deny', message: caller };
  const username = caller.username;
  let request;
  try {
    request = readCertificateRequest(Buffer.from(csr.spec.request, 'base64').toString('utf8'));
  } catch (error) {
    return {
      kind: 'deny',
      message: `the request is not a certificate request gatehouse can sign: ${errorMessage(error)}`,
    };
  }
  if (request.subject.commonName !== username)
    return {
      kind: 'deny',
      message: `the request names ${request.subject.commonName || 'no one'} (CN) but was made by ${username}: a gate certificate names its requester`,
    };
  const roles = request.subject.organizations;
  if (roles.length !== 1 || !(TALOS_ROLES as readonly string[]).includes(roles[0] ?? ''))
    return { kind: 'deny', message: `ask for exactly one Talos role (O=), one of ${TALOS_ROLES.join(', ')}` };
  const lifetimeMs = Math.min(maxLifetimeMs, (csr.spec.expirationSeconds ?? 3600) * 1000);
  return {
    kind: 'check',
    caller,
    role: roles[0] as string,
    publicKeyPem: request.publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    lifetimeMs,
  };
}

export interface SignerOptions {
  rest: RestClient;
  authorizer: Authorizer;
  authority: Authority;
  log: Logger;
  maxLifetimeMs: number;
  /** Users whose requests may name another person (REQUESTED_FOR_ANNOTATION): the controller's ServiceAccount. */
  delegates?: readonly string[];
  intervalMs?: number;
}

export class CertificateSigner {
  private readonly options: SignerOptions;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(options: SignerOptions) {
    this.options = options;
  }

  start(): void {
    const tick = () => {
      if (this.stopped) return;
      this.running = this.pass()
        .catch((error: unknown) =>
          this.options.log.warn({ err: errorMessage(error) }, 'talos gate signer: pass failed'),
        )
        .finally(() => {
          if (!this.stopped) this.timer = setTimeout(tick, this.options.intervalMs ?? 1000);
        });
    };
    tick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /** One look at the pending requests for this signer. */
  async pass(): Promise<void> {
    const list = await this.options.rest.request<{ items: CertificateSigningRequest[] }>(CSR_PATH, {
      query: { fieldSelector: `spec.signerName=${GATE_SIGNER}` },
    });
    for (const csr of list.items) await this.handle(csr);
  }

  private async handle(csr: CertificateSigningRequest): Promise<void> {
    const judgement = judgeRequest(csr, this.options.maxLifetimeMs, this.options.delegates);
    if (judgement.kind === 'skip') return;
    if (judgement.kind === 'deny') {
      await this.condition(csr, 'Denied', 'GateRefused', judgement.message);
      return;
    }
    const decision = await this.options.authorizer.decide(judgement.caller, {
      verb: judgement.role,
      resource: TALOS_API_RESOURCE,
      group: GROUP,
    });
    if (!decision.allowed) {
      await this.condition(
        csr,
        'Denied',
        'RoleNotGranted',
        `${judgement.caller.username} may not use the Talos role ${judgement.role} through the gate: it needs the verb ${judgement.role} on ${TALOS_API_RESOURCE}.${GROUP} (ClusterRole ${roleClusterRole(judgement.role)})`,
      );
      return;
    }
    const approved = await this.condition(
      csr,
      'Approved',
      'RoleGranted',
      `RBAC grants ${judgement.role} to ${judgement.caller.username}`,
    );
    if (!approved) return;
    const cert = issueCertificate(
      {
        subject: {
          commonName: judgement.caller.username,
          organizations: [judgement.role],
          organizationalUnits: judgement.caller.groups,
        },
        publicKey: createPublicKey(judgement.publicKeyPem),
        notAfter: new Date(Date.now() + judgement.lifetimeMs),
        usage: 'client',
      },
      this.options.authority,
    );
    // The chain: the certificate, then the gate CA (which the talosconfig needs to trust the gate).
    await this.options.rest
      .request(`${CSR_PATH}/${approved.metadata.name}/status`, {
        method: 'PUT',
        body: {
          ...approved,
          status: {
            ...approved.status,
            certificate: Buffer.from(cert + this.options.authority.cert).toString('base64'),
          },
        },
      })
      .catch((error: unknown) => {
        if (!(error instanceof KubeApiError && error.code === 409)) throw error;
      });
    this.options.log.info(
      { user: judgement.caller.username, role: judgement.role, csr: csr.metadata.name },
      'talos gate: certificate issued',
    );
  }

  /** Sets Approved or Denied (PUT on /approval, conditional on the version read); the object after, or undefined on a conflict. */
  private async condition(
    csr: CertificateSigningRequest,
    type: 'Approved' | 'Denied',
    reason: string,
    message: string,
  ): Promise<CertificateSigningRequest | undefined> {
    if ((csr.status?.conditions ?? []).some((c) => c.type === type)) return csr;
    try {
      return await this.options.rest.request<CertificateSigningRequest>(
        `${CSR_PATH}/${csr.metadata.name}/approval`,
        {
          method: 'PUT',
          body: {
            ...csr,
            status: {
              ...csr.status,
              conditions: [
                ...(csr.status?.conditions ?? []),
                { type, status: 'True', reason, message, lastUpdateTime: new Date().toISOString() },
              ],
            },
          },
        },
      );
    } catch (error) {
      if (error instanceof KubeApiError && error.code === 409) return undefined;
      throw error;
    }
  }
}
