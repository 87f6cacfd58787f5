// apid's fan-out, as the simulator plays it: a unary call whose `nodes` metadata names
// several nodes is made on each of them, and the replies are merged into one — each
// node's messages with common.Metadata.hostname set to the node as named, a node's failure
// as a message whose metadata carries the error and its status — as apid does for
// talosctl -n a,b (a reply to a call addressed with `node` carries no metadata).

/** One node's outcome: its reply's messages, or the gRPC status it failed with. */
export type NodeOutcome =
  { messages: Record<string, unknown>[] } | { error: { code: number; details: string } };

/** The merged reply of a fan-out, in the order the nodes were named. */
export function mergeFanOut(outcomes: readonly { node: string; outcome: NodeOutcome }[]): {
  messages: Record<string, unknown>[];
} {
  return {
    messages: outcomes.flatMap(({ node, outcome }) =>
      'error' in outcome
        ? [
            {
              metadata: {
                hostname: node,
                error: outcome.error.details,
                status: { code: outcome.error.code, message: outcome.error.details },
              },
            },
          ]
        : outcome.messages.map((m) => ({ ...m, metadata: { hostname: node } })),
    ),
  };
}
