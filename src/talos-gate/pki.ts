// The Talos API gate's own certificates: a CA (Ed25519, like a Talos cluster's), the
// gate's serving certificate, and the short-lived client certificates it issues to
// people (`gatehouse talosconfig`). A client certificate names its holder as Talos and
// Kubernetes read it: CN the Kubernetes user, O each Talos role (os:operator, …), OU
// each Kubernetes group (so that the gate's SubjectAccessReviews see the same groups).
//
// node:crypto verifies and parses certificates but cannot make them, and the shipped
// image has no openssl: the ASN.1 structures come from @peculiar/asn1-x509 and
// @peculiar/asn1-csr (docs/decisions.md says why these), the signatures from node:crypto.
import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  randomBytes,
  sign,
  verify,
  X509Certificate,
  type KeyObject,
} from 'node:crypto';
import { AsnConvert, OctetString } from '@peculiar/asn1-schema';
import {
  AlgorithmIdentifier,
  AttributeTypeAndValue,
  AttributeValue,
  AuthorityKeyIdentifier,
  BasicConstraints,
  Certificate,
  ExtendedKeyUsage,
  Extension,
  Extensions,
  GeneralName,
  KeyIdentifier,
  KeyUsage,
  KeyUsageFlags,
  Name,
  RelativeDistinguishedName,
  SubjectAlternativeName,
  SubjectKeyIdentifier,
  SubjectPublicKeyInfo,
  TBSCertificate,
  Validity,
  Version,
} from '@peculiar/asn1-x509';
import { CertificationRequest, CertificationRequestInfo } from '@peculiar/asn1-csr';

const ED25519 = '1.3.101.112';
const OID = {
  commonName: '2.5.4.3',
  organization: '2.5.4.10',
  organizationalUnit: '2.5.4.11',
  basicConstraints: '2.5.29.19',
  keyUsage: '2.5.29.15',
  extKeyUsage: '2.5.29.37',
  subjectAltName: '2.5.29.17',
  subjectKeyIdentifier: '2.5.29.14',
  authorityKeyIdentifier: '2.5.29.35',
  serverAuth: '1.3.6.1.5.5.7.3.1',
  clientAuth: '1.3.6.1.5.5.7.3.2',
} as const;

/** Who a certificate names: the subject's CN, O and OU entries. */
export interface Subject {
  commonName: string;
  organizations?: string[];
  organizationalUnits?: string[];
}

/** A CA that can sign: its certificate (PEM) and key. */
export interface Authority {
  cert: string;
  key: KeyObject;
}

function pem(kind: string, der: ArrayBuffer | Uint8Array): string {
  const b64 = Buffer.from(der instanceof Uint8Array ? der : new Uint8Array(der)).toString('base64');
  return `-----BEGIN ${kind}-----\n${(b64.match(/.{1,64}/g) ?? []).join('\n')}\n-----END ${kind}-----\n`;
}

function fromPem(text: string, kind: string): Buffer {
  const match = new RegExp(`-----BEGIN ${kind}-----([^-]+)-----END ${kind}-----`).exec(text);
  if (!match?.[1]) throw new Error(`not a PEM ${kind}`);
  return Buffer.from(match[1].replace(/\s+/g, ''), 'base64');
}

function name(subject: Subject): Name {
  const rdn = (type: string, value: string) =>
    new RelativeDistinguishedName([
      new AttributeTypeAndValue({ type, value: new AttributeValue({ utf8String: value }) }),
    ]);
  return new Name([
    ...(subject.organizations ?? []).map((o) => rdn(OID.organization, o)),
    ...(subject.organizationalUnits ?? []).map((ou) => rdn(OID.organizationalUnit, ou)),
    rdn(OID.commonName, subject.commonName),
  ]);
}

function spki(key: KeyObject): SubjectPublicKeyInfo {
  const der = (key.type === 'public' ? key : createPublicKey(key)).export({ type: 'spki', format: 'der' });
  return AsnConvert.parse(der, SubjectPublicKeyInfo);
}

function keyId(info: SubjectPublicKeyInfo): Uint8Array {
  return createHash('sha1').update(new Uint8Array(info.subjectPublicKey)).digest();
}

function extension(id: string, value: unknown, critical = false): Extension {
  return new Extension({ extnID: id, critical, extnValue: new OctetString(AsnConvert.serialize(value)) });
}

/**
 * A certificate serial: 16 random bytes whose first is 0x40–0x7f, so that the INTEGER is
 * positive (top bit clear, as RFC 5280 asks) and its DER minimal. A first byte of zero
 * followed by one below 0x80 is a padded INTEGER that OpenSSL refuses to load ("illegal
 * padding"): one certificate in 256 was unusable when only the top bit was cleared.
 */
export function serialNumber(random: Uint8Array = randomBytes(16)): ArrayBuffer {
  const serial = new Uint8Array(random);
  serial[0] = ((serial[0] ?? 0) & 0x3f) | 0x40;
  return serial.buffer;
}

export interface IssueRequest {
  subject: Subject;
  /** The public key to certify. */
  publicKey: KeyObject;
  notBefore?: Date;
  notAfter: Date;
  usage: 'ca' | 'server' | 'client';
  dnsNames?: string[];
  ipAddresses?: string[];
}

/** Signs a certificate; self-signed (a CA) when `issuer` is absent. Returns PEM. */
export function issueCertificate(request: IssueRequest, issuer?: Authority, selfKey?: KeyObject): string {
  const subjectInfo = spki(request.publicKey);
  const issuerCert = issuer ? AsnConvert.parse(fromPem(issuer.cert, 'CERTIFICATE'), Certificate) : undefined;
  const signingKey = issuer?.key ?? selfKey;
  if (!signingKey) throw new Error('a self-signed certificate needs its private key');
  const issuerInfo = issuerCert?.tbsCertificate.subjectPublicKeyInfo ?? subjectInfo;
  const keyUsage =
    request.usage === 'ca'
      ? KeyUsageFlags.keyCertSign | KeyUsageFlags.cRLSign | KeyUsageFlags.digitalSignature
      : KeyUsageFlags.digitalSignature;
  const extensions = [
    extension(OID.basicConstraints, new BasicConstraints({ cA: request.usage === 'ca' }), true),
    extension(OID.keyUsage, new KeyUsage(keyUsage), true),
    extension(OID.subjectKeyIdentifier, new SubjectKeyIdentifier(keyId(subjectInfo))),
    extension(
      OID.authorityKeyIdentifier,
      new AuthorityKeyIdentifier({ keyIdentifier: new KeyIdentifier(keyId(issuerInfo)) }),
    ),
  ];
  if (request.usage !== 'ca')
    extensions.push(
      extension(
        OID.extKeyUsage,
        new ExtendedKeyUsage([request.usage === 'server' ? OID.serverAuth : OID.clientAuth]),
      ),
    );
  const altNames = [
    ...(request.dnsNames ?? []).map((d) => new GeneralName({ dNSName: d })),
    ...(request.ipAddresses ?? []).map((ip) => new GeneralName({ iPAddress: ip })),
  ];
  if (altNames.length > 0)
    extensions.push(extension(OID.subjectAltName, new SubjectAlternativeName(altNames)));
  const algorithm = new AlgorithmIdentifier({ algorithm: ED25519 });
  const tbs = new TBSCertificate({
    version: Version.v3,
    serialNumber: serialNumber(),
    signature: algorithm,
    issuer: issuerCert?.tbsCertificate.subject ?? name(request.subject),
    // A minute back, for clocks a little behind the issuer's.
    validity: new Validity({
      notBefore: request.notBefore ?? new Date(Date.now() - 60_000),
      notAfter: request.notAfter,
    }),
    subject: name(request.subject),
    subjectPublicKeyInfo: subjectInfo,
    extensions: new Extensions(extensions),
  });
  const tbsDer = AsnConvert.serialize(tbs);
  const signature = sign(null, new Uint8Array(tbsDer), signingKey);
  const cert = new Certificate({
    tbsCertificate: tbs,
    signatureAlgorithm: algorithm,
    signatureValue: new Uint8Array(signature).buffer,
  });
  return pem('CERTIFICATE', AsnConvert.serialize(cert));
}

/** A new Ed25519 CA valid for `days`. */
export function createAuthority(commonName: string, days = 3650): Authority & { keyPem: string } {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const cert = issueCertificate(
    {
      subject: { commonName, organizations: ['gatehouse'] },
      publicKey,
      notAfter: new Date(Date.now() + days * 86_400_000),
      usage: 'ca',
    },
    undefined,
    privateKey,
  );
  return { cert, key: privateKey, keyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString() };
}

/** A new Ed25519 key pair, the private key as PKCS#8 PEM. */
export function newKey(): { privateKey: KeyObject; keyPem: string } {
  const { privateKey } = generateKeyPairSync('ed25519');
  return { privateKey, keyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString() };
}

export function loadAuthority(certPem: string, keyPem: string): Authority {
  const key = createPrivateKey(keyPem);
  const cert = new X509Certificate(certPem);
  if (!cert.ca) throw new Error('the gate CA certificate is not a CA (basicConstraints cA is not set)');
  if (!cert.checkPrivateKey(key))
    throw new Error('the gate CA key is not the key of the gate CA certificate');
  return { cert: certPem, key };
}

/** A PKCS#10 certificate request for `subject`, signed with `key` (PEM). */
export function createCertificateRequest(subject: Subject, key: KeyObject): string {
  const info = new CertificationRequestInfo({ version: 0, subject: name(subject), subjectPKInfo: spki(key) });
  const signature = sign(null, new Uint8Array(AsnConvert.serialize(info)), key);
  const request = new CertificationRequest({
    certificationRequestInfo: info,
    signatureAlgorithm: new AlgorithmIdentifier({ algorithm: ED25519 }),
    signature: new Uint8Array(signature).buffer,
  });
  return pem('CERTIFICATE REQUEST', AsnConvert.serialize(request));
}

/** A certificate request's subject and public key, after checking its signature (throws otherwise). */
export function readCertificateRequest(text: string): { subject: Required<Subject>; publicKey: KeyObject } {
  const request = AsnConvert.parse(fromPem(text, 'CERTIFICATE REQUEST'), CertificationRequest);
  const info = request.certificationRequestInfo;
  if (request.signatureAlgorithm.algorithm !== ED25519)
    throw new Error(
      'the certificate request is not signed with Ed25519, the only key type the gate certifies',
    );
  const publicKey = createPublicKey({
    key: Buffer.from(AsnConvert.serialize(info.subjectPKInfo)),
    format: 'der',
    type: 'spki',
  });
  const infoDer = request.certificationRequestInfoRaw ?? AsnConvert.serialize(info);
  if (!verify(null, new Uint8Array(infoDer), publicKey, new Uint8Array(request.signature)))
    throw new Error('the certificate request signature does not verify');
  const subject: Required<Subject> = { commonName: '', organizations: [], organizationalUnits: [] };
  for (const rdn of info.subject)
    for (const attribute of rdn) {
      const value = attribute.value.toString();
      if (attribute.type === OID.commonName) subject.commonName = value;
      if (attribute.type === OID.organization) subject.organizations.push(value);
      if (attribute.type === OID.organizationalUnit) subject.organizationalUnits.push(value);
    }
  return { subject, publicKey };
}

/** The subject of a certificate as node:crypto parses it (`CN=…\nO=…`), split into its parts. */
export function subjectOf(cert: X509Certificate | { subject: string }): Required<Subject> {
  const subject: Required<Subject> = { commonName: '', organizations: [], organizationalUnits: [] };
  for (const line of cert.subject.split('\n')) {
    const eq = line.indexOf('=');
    const key = line.slice(0, eq);
    const value = line.slice(eq + 1);
    if (key === 'CN') subject.commonName = value;
    if (key === 'O') subject.organizations.push(value);
    if (key === 'OU') subject.organizationalUnits.push(value);
  }
  return subject;
}
