// Image references as containerd names them, which is how Talos pulls and looks up
// images (internal/pkg/containers/image: reference.ParseDockerRef): a name without a
// registry is Docker Hub's (`docker.io/`), one without a path there is an official
// image (`docker.io/library/`), and a name without tag or digest is `:latest`.
// ImageService.Pull stores the image under that normalised name, its
// `<name>@<digest>` and its bare digest; LifecycleService.Upgrade looks the installer
// up by exactly the name it is given. So the installer gatehouse installs is named as
// it was stored, never as it was typed.

/**
 * Docker's normalised form of an image reference.
 *
 * @example normalizeImageReference('alpine:3') // 'docker.io/library/alpine:3'
 */
export function normalizeImageReference(reference: string): string {
  const ref = reference.trim();
  const at = ref.indexOf('@');
  const named = at >= 0 ? ref.slice(0, at) : ref;
  const digest = at >= 0 ? ref.slice(at) : '';
  const slash = named.indexOf('/');
  const first = slash >= 0 ? named.slice(0, slash) : '';
  // The first component is a registry when it looks like a host: a dot, a port, or localhost.
  const hasRegistry = slash >= 0 && (first.includes('.') || first.includes(':') || first === 'localhost');
  let name = hasRegistry ? named : `docker.io/${slash >= 0 ? named : `library/${named}`}`;
  if (name.startsWith('docker.io/') && !name.slice('docker.io/'.length).includes('/'))
    name = `docker.io/library/${name.slice('docker.io/'.length)}`;
  // With a digest, the digest names the image: a tag beside it is dropped.
  if (digest) return `${imageRepository(name)}${digest}`;
  const lastSlash = name.lastIndexOf('/');
  const hasTag = name.slice(lastSlash + 1).includes(':');
  return `${name}${hasTag ? '' : ':latest'}`;
}

/** The repository part of a normalised reference (no tag, no digest). */
export function imageRepository(normalized: string): string {
  const withoutDigest = normalized.split('@')[0] ?? normalized;
  const lastSlash = withoutDigest.lastIndexOf('/');
  const colon = withoutDigest.lastIndexOf(':');
  return colon > lastSlash ? withoutDigest.slice(0, colon) : withoutDigest;
}
