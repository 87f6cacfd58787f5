// The node a Node-scoped check is evaluated for, and how its variables are replaced.
// A pure module: the runner builds the target from the Node cache, probes use it.
import { isIP } from 'node:net';
import { NODE_VARIABLES, type NodeVariable } from '../api/cluster-health-check.ts';
import type { KubeObject } from '../kube/informer.ts';

export interface NodeTarget {
  name: string;
  /** The node's InternalIP (else ExternalIP); undefined when it reports none. */
  ip: string | undefined;
  /** The Node as the controller caches it (slimmed: no images or volumes); CEL's `node`. */
  object: KubeObject;
}

interface NodeAddresses {
  status?: { addresses?: { type?: string; address?: string }[] };
}

/** The target for a cached Node. */
export function nodeTarget(node: KubeObject): NodeTarget {
  const addresses = (node as NodeAddresses).status?.addresses ?? [];
  const ip =
    addresses.find((a) => a.type === 'InternalIP')?.address ??
    addresses.find((a) => a.type === 'ExternalIP')?.address;
  return { name: node.metadata.name, ip, object: node };
}

const VARIABLE = /\$\(([A-Z_]+)\)/g;

/**
 * `text` with $(NODE_NAME) and $(NODE_IP) replaced (through `escape`, e.g.
 * encodeURIComponent for URLs). Throws on a variable without a value here — a Cluster
 * evaluation, a node without an address — or an unknown one (which the API server refuses
 * already), so a probe never asks about a half-replaced target.
 */
export function replaceNodeVariables(
  text: string,
  node: NodeTarget | undefined,
  field: string,
  escape: (value: string) => string = (v) => v,
): string {
  if (!text.includes('$(')) return text;
  return text.replace(VARIABLE, (whole, name: string) => {
    if (!(NODE_VARIABLES as readonly string[]).includes(name))
      throw new Error(
        `${field}: unknown variable ${whole}; only ${NODE_VARIABLES.map((v) => `$(${v})`).join(', ')}`,
      );
    if (!node)
      throw new Error(
        `${field} uses ${whole}, which has a value only for a Node-scoped check evaluated for a node`,
      );
    const value = valueOf(name as NodeVariable, node);
    if (value === undefined)
      throw new Error(
        `${field} uses ${whole}, but node ${node.name} reports no InternalIP or ExternalIP address`,
      );
    return escape(value);
  });
}

function valueOf(name: NodeVariable, node: NodeTarget): string | undefined {
  switch (name) {
    case 'NODE_NAME':
      return node.name;
    case 'NODE_IP':
      return node.ip;
  }
}

/**
 * encodeURIComponent, except that an IP address stays as it is: an IPv6 address's colons
 * are what a URL host needs (written in brackets by the check: http://[$(NODE_IP)]:9100/).
 */
export function escapeForUrl(value: string): string {
  return isIP(value) ? value : encodeURIComponent(value);
}
