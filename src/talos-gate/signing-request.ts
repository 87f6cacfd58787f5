// A request for a gate certificate, from the side that asks: the Kubernetes
// CertificateSigningRequest for the signer talos.dev/gate, and the wait for its verdict.
// `gatehouse talosconfig` and the controller's HTTP API ask; the signer (signer.ts) judges
// and signs. Apart from the signer so that asking never loads the X.509 code it signs with.
import { randomBytes } from 'node:crypto';
import type { RestClient } from '../kube/rest.ts';
import { sleep } from '../wait.ts';

export const GATE_SIGNER = 'talos.dev/gate';
/** On a request the HTTP API made for someone: who, as JSON `{username, uid?, groups, extra?}`. */
export const REQUESTED_FOR_ANNOTATION = 'talos.dev/requested-for';
/** The resource whose custom verbs (os:admin, os:operator, …) grant Talos roles through the gate. */
export const TALOS_API_RESOURCE = 'talosapi';
export const CSR_PATH = '/apis/certificates.k8s.io/v1/certificatesigningrequests';

export interface CertificateSigningRequest {
  metadata: { name: string; resourceVersion?: string; annotations?: Record<string, string> };
  spec: {
    request: string;
    signerName: string;
    username?: string;
    uid?: string;
    groups?: string[];
    extra?: Record<string, string[]>;
    expirationSeconds?: number;
  };
  status?: {
    certificate?: string;
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
  };
}

/**
 * A CertificateSigningRequest for the gate's signer, named after `user` (with a random
 * suffix), for the PEM request `pem`; `annotations` say whom a delegate asks for.
 */
export function gateSigningRequest(
  user: string,
  pem: string,
  expirationSeconds: number,
  annotations?: Record<string, string>,
): { name: string; body: Record<string, unknown> } {
  const name = `gatehouse-talos-${user
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .slice(0, 40)}-${randomBytes(3).toString('hex')}`;
  return {
    name,
    body: {
      apiVersion: 'certificates.k8s.io/v1',
      kind: 'CertificateSigningRequest',
      metadata: { name, ...(annotations ? { annotations } : {}) },
      spec: {
        request: Buffer.from(pem).toString('base64'),
        signerName: GATE_SIGNER,
        usages: ['digital signature', 'client auth'],
        // Kubernetes' minimum is 10 minutes.
        expirationSeconds: Math.max(600, expirationSeconds),
      },
    },
  };
}

export type SigningVerdict = { certificate: string } | { refused: string } | { timedOut: true };

/**
 * Waits up to `waitMs` for the signer's verdict on request `name`: the chain's PEM (the
 * certificate, then the gate CA), the refusal's reason, or that none came. Read errors
 * are thrown as they are.
 */
export async function awaitSigning(
  rest: RestClient,
  name: string,
  waitMs: number,
  intervalMs: number,
): Promise<SigningVerdict> {
  const until = Date.now() + waitMs;
  for (;;) {
    const csr = await rest.request<CertificateSigningRequest>(`${CSR_PATH}/${name}`);
    const refused = csr.status?.conditions?.find((c) => c.type === 'Denied' || c.type === 'Failed');
    if (refused) return { refused: refused.message ?? refused.reason ?? 'no reason given' };
    if (csr.status?.certificate)
      return { certificate: Buffer.from(csr.status.certificate, 'base64').toString('utf8') };
    if (Date.now() >= until) return { timedOut: true };
    await sleep(intervalMs);
  }
}

/** The ClusterRole that grants a Talos role through the gate. */
export function roleClusterRole(role: string): string {
  return `gatehouse:talos-${role.replace(/^os:/, '').replace(/:/g, '-')}`;
}
