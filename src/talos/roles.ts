// The Talos roles a client certificate can carry (its O= entries), as Talos names them:
// facts of the Talos API, read by the Talos API gate (src/talos-gate) and granted through
// it by RBAC (src/manifests/rbac.ts).
export const TALOS_ROLES = [
  'os:admin',
  'os:operator',
  'os:reader',
  'os:etcd:backup',
  'os:image:verifier',
  'os:meta:writer',
] as const;
export type TalosRole = (typeof TALOS_ROLES)[number];
