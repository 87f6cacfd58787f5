// Where a held call stands, looked up afresh: the node's NodeActions read, the gate's
// decision (decide.ts) taken, and the caller's action created when it has none yet
// (after a SubjectAccessReview as the caller). One look per poll of a held call, for one
// node (server.ts) or for each node of a fan-out (fan-out.ts).
import { EXECUTED_ANNOTATION } from '../api/names.ts';
import type { ObservedNodeAction } from '../api/node-action.ts';
import type { Authorizer, Caller } from '../http/auth.ts';
import type { RestClient } from '../kube/rest.ts';
import type { Logger } from '../log.ts';
import { cancelUnexecuted, claim, createAction, nodeActions } from './actions.ts';
import { decideGatedCall, type GatedCall } from './decide.ts';

export type Look =
  /** Approved: claim it with `claim`, then forward. */
  | { kind: 'ready'; action: ObservedNodeAction; claim: Record<string, string> }
  | { kind: 'wait'; action: ObservedNodeAction }
  /** The caller may not ask for the action at all. */
  | { kind: 'denied'; message: string };

export interface HolderOptions {
  rest: RestClient;
  authorizer: Authorizer;
  log: Logger;
  approvedDeadline: string;
  instance?: string | undefined;
}

export class Holder {
  private readonly o: HolderOptions;

  constructor(options: HolderOptions) {
    this.o = options;
  }

  /** Where the call stands now; an action this look creates is added to `created`. */
  async look(caller: Caller, call: GatedCall, description: string, created: Set<string>): Promise<Look> {
    for (;;) {
      const actions = await nodeActions(this.o.rest, call.node);
      const decision = decideGatedCall(call, actions);
      if (decision.kind === 'forward')
        return { kind: 'ready', action: decision.action, claim: decision.claim };
      if (decision.kind === 'wait') return { kind: 'wait', action: decision.action };
      const may = await this.o.authorizer.decide(caller, { verb: 'create', resource: 'nodeactions' });
      if (!may.allowed)
        return {
          kind: 'denied',
          message: `talos gate: ${description} is gated and ${caller.username} may not create nodeactions.talos.dev to ask for it${may.reason ? ` (${may.reason})` : ''}; ask an administrator for the ClusterRole gatehouse:requester`,
        };
      const action = await createAction(this.o.rest, call, actions, {
        description,
        approvedDeadline: this.o.approvedDeadline,
        ...(this.o.instance ? { instance: this.o.instance } : {}),
      });
      created.add(action.metadata.name);
      this.o.log.info(
        { action: action.metadata.name, node: call.node },
        'talos gate: call held, NodeAction created',
      );
    }
  }

  /** Claims a ready action (conditional on the version looked at); false when it changed meanwhile. */
  claim(look: Extract<Look, { kind: 'ready' }>): Promise<boolean> {
    return claim(this.o.rest, look.action, look.claim);
  }

  /** The caller gave up while held: the actions its call made, and nobody executed, go too. */
  async cancel(created: ReadonlySet<string>): Promise<void> {
    for (const name of created) {
      const cancelled = await cancelUnexecuted(
        this.o.rest,
        name,
        (a) => a.metadata.annotations?.[EXECUTED_ANNOTATION] === 'true',
      );
      this.o.log.info({ action: name, cancelled }, 'talos gate: caller cancelled a held call');
    }
  }
}
