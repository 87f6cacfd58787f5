// The gate's CA lives in a Secret of gatehouse's namespace (keys ca.crt and ca.key),
// so that every replica serves and signs with the same one and a restart keeps it. The
// first replica to find none creates it; a replica that loses that race reads the
// winner's (the create is refused with a conflict).
import { createPublicKey, X509Certificate } from 'node:crypto';
import { KubeApiError, type RestClient } from '../kube/rest.ts';
import { createAuthority, issueCertificate, loadAuthority, newKey, type Authority } from './pki.ts';

export const CA_CERT_KEY = 'ca.crt';
export const CA_KEY_KEY = 'ca.key';

interface SecretObject {
  data?: Record<string, string>;
}

const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
const unb64 = (text: string | undefined) =>
  text === undefined ? undefined : Buffer.from(text, 'base64').toString('utf8');

/** The gate CA from `namespace/name`, created there when it does not exist yet. */
export async function loadOrCreateAuthority(
  rest: RestClient,
  namespace: string,
  name: string,
): Promise<Authority> {
  const path = `/api/v1/namespaces/${encodeURIComponent(namespace)}/secrets`;
  const where = `Secret ${namespace}/${name}`;
  for (let attempt = 0; attempt < 3; attempt++) {
    let secret: SecretObject | undefined;
    try {
      secret = await rest.request<SecretObject>(`${path}/${encodeURIComponent(name)}`);
    } catch (error) {
      if (!(error instanceof KubeApiError && error.code === 404)) throw error;
    }
    if (secret) {
      const cert = unb64(secret.data?.[CA_CERT_KEY]);
      const key = unb64(secret.data?.[CA_KEY_KEY]);
      if (!cert || !key)
        throw new Error(
          `${where} has no ${CA_CERT_KEY} and ${CA_KEY_KEY}: delete it to have a new CA made, or fill both`,
        );
      try {
        return loadAuthority(cert, key);
      } catch (error) {
        throw new Error(`${where}: ${error instanceof Error ? error.message : String(error)}`, {
          cause: error,
        });
      }
    }
    const made = createAuthority('gatehouse talos gate CA');
    try {
      await rest.request(path, {
        method: 'POST',
        body: {
          apiVersion: 'v1',
          kind: 'Secret',
          metadata: {
            name,
            namespace,
            labels: { 'app.kubernetes.io/name': 'gatehouse', 'app.kubernetes.io/component': 'talos-gate' },
          },
          type: 'Opaque',
          data: { [CA_CERT_KEY]: b64(made.cert), [CA_KEY_KEY]: b64(made.keyPem) },
        },
      });
      return made;
    } catch (error) {
      if (!(error instanceof KubeApiError && error.code === 409)) throw error;
    }
  }
  throw new Error(`${where} kept changing while the gate read it`);
}

/** A serving certificate for the gate's names, issued by its own CA (valid a year; made anew at each start). */
export function servingCertificate(
  ca: Authority,
  names: { dnsNames: string[]; ipAddresses: string[] },
): { cert: string; key: string } {
  const key = newKey();
  const cert = issueCertificate(
    {
      subject: { commonName: names.dnsNames[0] ?? names.ipAddresses[0] ?? 'talos-gate' },
      publicKey: createPublicKey(key.privateKey),
      notAfter: new Date(
        Math.min(Date.now() + 365 * 86_400_000, new X509Certificate(ca.cert).validToDate.getTime()),
      ),
      usage: 'server',
      ...names,
    },
    ca,
  );
  return { cert, key: key.keyPem };
}
