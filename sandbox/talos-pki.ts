// The Talos side of the sandbox's PKI, made like a Talos cluster's: an Ed25519 CA that
// signs apid's serving certificate and the clients' certificates (whose organisation
// is their Talos role), and a talosconfig pointing at the simulator.
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { talosConfigYaml } from '../src/talos/config.ts';
import { CertificateAuthority, type CertificatePaths } from './pki.ts';

export interface TalosPki {
  /** The CA certificate (PEM file). */
  ca: string;
  /** apid's serving certificate and key. */
  server: CertificatePaths;
  /** A client with the os:admin role, as `talosctl gen config` makes. */
  admin: CertificatePaths;
}

/** A Talos-like CA in `dir`, with a serving certificate for the addresses given. */
export async function createTalosPki(
  dir: string,
  serving: { ipAddresses: string[]; dnsNames?: string[] } = {
    ipAddresses: ['127.0.0.1'],
    dnsNames: ['localhost'],
  },
): Promise<TalosPki> {
  await mkdir(dir, { recursive: true });
  const ca = await CertificateAuthority.create(dir, 'talos-ca', 'talos', 'ed25519');
  const [server, admin] = await Promise.all([
    ca.issue({
      name: 'talos-apid',
      commonName: 'apid',
      usage: 'server',
      ipAddresses: serving.ipAddresses,
      dnsNames: serving.dnsNames ?? [],
    }),
    ca.issue({ name: 'talos-admin', commonName: 'admin', organizations: ['os:admin'], usage: 'client' }),
  ]);
  return { ca: ca.cert, server, admin };
}

/** Writes a talosconfig with one context that reaches `endpoints` with the admin's certificate. */
export async function writeTalosConfig(
  path: string,
  pki: Pick<TalosPki, 'ca' | 'admin'>,
  context: { name: string; endpoints: string[]; nodes?: string[] },
): Promise<string> {
  const [ca, crt, key] = await Promise.all([
    readFile(pki.ca, 'utf8'),
    readFile(pki.admin.cert, 'utf8'),
    readFile(pki.admin.key, 'utf8'),
  ]);
  await writeFile(path, talosConfigYaml({ ...context, ca, crt, key }), { mode: 0o600 });
  return path;
}

export function talosPkiPaths(dir: string): TalosPki {
  return {
    ca: join(dir, 'talos-ca.crt'),
    server: { cert: join(dir, 'talos-apid.crt'), key: join(dir, 'talos-apid.key') },
    admin: { cert: join(dir, 'talos-admin.crt'), key: join(dir, 'talos-admin.key') },
  };
}
