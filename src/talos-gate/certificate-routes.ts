// Routes of the controller's HTTP API (registered by controller.ts): who the caller is,
// and a Talos API gate certificate for someone who reaches only this
// API (a bearer token, no kubeconfig):
//
//   GET  /v1/whoami                the authenticated caller, as the API server knows them
//   POST /v1/talos/certificates    sign the caller's certificate request for a Talos role
//
// The controller holds no CA and impersonates no one: it checks the request (the caller's
// own name, one Talos role RBAC grants them), then creates a CertificateSigningRequest for
// the gate's signer naming the caller in the annotation talos.dev/requested-for, and
// waits for the gate to sign it. The signer believes that annotation only from this
// controller's ServiceAccount and asks RBAC again (src/talos-gate/signer.ts).
import { GROUP } from '../api/common.ts';
import { KubeApiError, type RestClient } from '../kube/rest.ts';
import type { Access } from '../http/access.ts';
import { ApiError } from '../http/api-error.ts';
import { apiServerUnavailable, type Caller } from '../http/auth.ts';
import { readJson } from '../http/body.ts';
import type { Router } from '../http/router.ts';
import { talosCertificateRequestSchema, type TalosCertificateRequest } from '../http/schemas.ts';
import { validator } from '../http/validation.ts';
import { TALOS_ROLES } from '../talos/roles.ts';
import { errorMessage } from '../wait.ts';
import {
  awaitSigning,
  CSR_PATH,
  gateSigningRequest,
  REQUESTED_FOR_ANNOTATION,
  roleClusterRole,
  TALOS_API_RESOURCE,
} from './signing-request.ts';

const readRequest = validator<TalosCertificateRequest>(
  talosCertificateRequestSchema(),
  'the certificate request',
);

/** The subject the request asks for, checked against the caller; throws 422 with what to fix. */
async function requestedRole(pem: string, caller: Caller): Promise<string> {
  // The X.509 code loads with the first request, not with the controller.
  const { readCertificateRequest } = await import('./pki.ts');
  let subject;
  try {
    subject = readCertificateRequest(pem).subject;
  } catch (error) {
    throw new ApiError(422, `certificateRequest is not a PEM certificate request: ${errorMessage(error)}`, {
      details: [{ field: 'certificateRequest', message: 'send a PKCS#10 request in PEM' }],
    });
  }
  if (subject.commonName !== caller.username)
    throw new ApiError(
      422,
      `the request names ${subject.commonName || 'no one'} (CN), but you are ${caller.username}: a gate certificate names its holder`,
      { details: [{ field: 'certificateRequest', message: `set CN=${caller.username}` }] },
    );
  const [role, ...more] = subject.organizations;
  if (role === undefined || more.length > 0 || !(TALOS_ROLES as readonly string[]).includes(role))
    throw new ApiError(422, `ask for exactly one Talos role (O=), one of ${TALOS_ROLES.join(', ')}`, {
      details: [{ field: 'certificateRequest', message: `O must be one of ${TALOS_ROLES.join(', ')}` }],
    });
  return role;
}

/** How long a request waits for the gate to sign. */
const SIGN_WAIT_MS = 30_000;

/** Creates the CertificateSigningRequest for `caller`, naming them for the signer; its name. */
async function createRequest(
  rest: RestClient,
  caller: Caller,
  request: TalosCertificateRequest,
): Promise<string> {
  const { name, body } = gateSigningRequest(
    caller.username,
    request.certificateRequest,
    request.durationSeconds ?? 8 * 3600,
    {
      [REQUESTED_FOR_ANNOTATION]: JSON.stringify({
        username: caller.username,
        groups: caller.groups,
        ...(caller.uid ? { uid: caller.uid } : {}),
        ...(caller.extra ? { extra: caller.extra } : {}),
      }),
    },
  );
  try {
    await rest.request(CSR_PATH, { method: 'POST', body });
  } catch (error) {
    if (error instanceof KubeApiError && error.code === 403)
      throw new ApiError(
        500,
        `gatehouse may not create CertificateSigningRequests (${error.message}): its ClusterRole needs create on certificatesigningrequests.certificates.k8s.io`,
      );
    throw apiServerUnavailable('ask for a gate certificate', error);
  }
  return name;
}

/** Waits for the signer's verdict on `name`: the chain's PEM, or an ApiError. */
async function signed(rest: RestClient, name: string): Promise<string> {
  let verdict;
  try {
    verdict = await awaitSigning(rest, name, SIGN_WAIT_MS, 250);
  } catch (error) {
    throw apiServerUnavailable(`read CertificateSigningRequest ${name}`, error);
  }
  if ('certificate' in verdict) return verdict.certificate;
  if ('refused' in verdict)
    throw new ApiError(403, `the Talos API gate refused the certificate: ${verdict.refused}`);
  throw new ApiError(
    504,
    `CertificateSigningRequest ${name} was not signed within ${String(SIGN_WAIT_MS / 1000)}s: is the Talos API gate (gatehouse talos-gate) running, with this controller's ServiceAccount among its --delegate users? It signs them.`,
  );
}

export function talosCertificateRoutes(router: Router, access: Access, rest: RestClient): void {
  router.on(
    'GET',
    '/v1/whoami',
    access.guard('whoami', async (req) => {
      const caller = await access.caller(req);
      return { status: 200, body: { username: caller.username, groups: caller.groups } };
    }),
  );
  router.on(
    'POST',
    '/v1/talos/certificates',
    access.guard('talos-certificates', async (req) => {
      const caller = await access.caller(req);
      const request = readRequest(await readJson(req.raw));
      const role = await requestedRole(request.certificateRequest, caller);
      await access.authorize(
        caller,
        { verb: role, resource: TALOS_API_RESOURCE, group: GROUP },
        roleClusterRole(role),
      );
      access.takeCreation(caller);
      const release = access.openStream(caller);
      try {
        const name = await createRequest(rest, caller, request);
        const chain = await signed(rest, name);
        return { status: 201, body: { certificate: chain, role, certificateSigningRequest: name } };
      } finally {
        release();
      }
    }),
  );
}
