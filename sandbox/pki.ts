// A throwaway PKI for one sandbox, made with the openssl command line (Node's crypto
// cannot issue certificates). Every file lands in one directory that dies with the
// sandbox.
import { execFile } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export type KeyType = 'ec' | 'ed25519' | 'rsa';

export interface CertificateRequest {
  /** File stem: writes `<name>.crt` and `<name>.key`. */
  name: string;
  commonName: string;
  organizations?: string[];
  /** DNS names and IP addresses for a serving certificate. */
  dnsNames?: string[];
  ipAddresses?: string[];
  usage: 'server' | 'client' | 'both';
  keyType?: KeyType;
}

export interface CertificatePaths {
  cert: string;
  key: string;
}

const DAYS = '3650';

function keyArgs(type: KeyType): string[] {
  switch (type) {
    case 'ec':
      return ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1'];
    case 'ed25519':
      return ['-newkey', 'ed25519'];
    case 'rsa':
      return ['-newkey', 'rsa:2048'];
  }
}

/** The subject and extensions as an openssl config, so no system defaults leak in. */
function opensslConfig(
  subject: { commonName: string; organizations?: string[] },
  extensions: string[],
): string {
  const dn = [`CN = ${subject.commonName}`, ...(subject.organizations ?? []).map((o, i) => `${i}.O = ${o}`)];
  return [
    '[req]',
    'distinguished_name = dn',
    'prompt = no',
    'x509_extensions = ext',
    '[dn]',
    ...dn,
    '[ext]',
    ...extensions,
    '',
  ].join('\n');
}

async function openssl(args: string[]): Promise<void> {
  try {
    await run('openssl', args);
  } catch (error) {
    const stderr = (error as { stderr?: string }).stderr ?? '';
    throw new Error(`openssl ${args[0] ?? ''} failed: ${stderr.trim() || String(error)}`, { cause: error });
  }
}

export class CertificateAuthority {
  readonly dir: string;
  readonly cert: string;
  readonly key: string;
  readonly keyType: KeyType;

  private constructor(dir: string, name: string, keyType: KeyType) {
    this.dir = dir;
    this.cert = join(dir, `${name}.crt`);
    this.key = join(dir, `${name}.key`);
    this.keyType = keyType;
  }

  static async create(dir: string, name: string, commonName: string, keyType: KeyType = 'ec') {
    const ca = new CertificateAuthority(dir, name, keyType);
    const config = join(dir, `${name}.cnf`);
    await writeFile(
      config,
      opensslConfig({ commonName }, [
        'basicConstraints = critical,CA:TRUE',
        'keyUsage = critical,keyCertSign,cRLSign,digitalSignature',
        'subjectKeyIdentifier = hash',
      ]),
    );
    await openssl([
      'req', '-x509', '-config', config, ...keyArgs(keyType), '-nodes',
      '-keyout', ca.key, '-out', ca.cert, '-days', DAYS,
    ]); // prettier-ignore
    return ca;
  }

  async issue(request: CertificateRequest): Promise<CertificatePaths> {
    const paths = { cert: join(this.dir, `${request.name}.crt`), key: join(this.dir, `${request.name}.key`) };
    const usage = { server: 'serverAuth', client: 'clientAuth', both: 'serverAuth,clientAuth' }[
      request.usage
    ];
    const keyType = request.keyType ?? this.keyType;
    const extensions = [
      'basicConstraints = critical,CA:FALSE',
      // Ed25519 keys only sign; RSA key exchange would also want keyEncipherment.
      `keyUsage = critical,digitalSignature${keyType === 'rsa' ? ',keyEncipherment' : ''}`,
      `extendedKeyUsage = ${usage}`,
      'authorityKeyIdentifier = keyid',
    ];
    const altNames = [
      ...(request.dnsNames ?? []).map((d) => `DNS:${d}`),
      ...(request.ipAddresses ?? []).map((ip) => `IP:${ip}`),
    ];
    if (altNames.length > 0) extensions.push(`subjectAltName = ${altNames.join(',')}`);
    const config = join(this.dir, `${request.name}.cnf`);
    await writeFile(config, opensslConfig(request, extensions));
    await openssl([
      'req', '-x509', '-config', config, ...keyArgs(keyType), '-nodes',
      '-keyout', paths.key, '-out', paths.cert, '-days', DAYS, '-CA', this.cert, '-CAkey', this.key,
    ]); // prettier-ignore
    return paths;
  }
}

/** A bare key pair (PEM), e.g. for signing service-account tokens. */
export async function generateKeyPair(
  dir: string,
  name: string,
): Promise<CertificatePaths & { pub: string }> {
  const key = join(dir, `${name}.key`);
  const pub = join(dir, `${name}.pub`);
  await openssl(['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-out', key]);
  await openssl(['pkey', '-in', key, '-pubout', '-out', pub]);
  return { cert: pub, key, pub };
}

export async function base64File(path: string): Promise<string> {
  return (await readFile(path)).toString('base64');
}
