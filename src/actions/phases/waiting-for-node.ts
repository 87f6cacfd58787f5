// WaitingForNode: the action's work is under way; the node shows when it is done, as
// the action's kind says (src/actions/kinds/: completion), one handler per Completion.
import type { DecisionBuilder } from '../decision.ts';
import { completionOf, kindOf, type Completion } from '../kinds/index.ts';
import { confirmsTry, confirmTry } from './try-confirm.ts';

type PhaseHandler = (b: DecisionBuilder) => void;

/** The node is back with a new boot ID and Ready: its boot hooks run next. */
const rebooted: PhaseHandler = (b) => {
  const { spec, node, nodeName, status, condition, transition } = b;
  const back = node !== undefined && node.bootID !== status.bootIDBefore;
  if (node && back && node.ready) {
    const missed = kindOf(spec).missed?.(spec, status, node);
    if (missed) {
      b.end('Failed', missed);
      return;
    }
    status.bootIDAfter = node.bootID;
    const message = `node ${nodeName} is back and Ready with boot ID ${node.bootID ?? '?'}`;
    condition('NodeReturned', 'True', 'Rebooted', message);
    transition('RunningPostHooks', `${message}; running its boot hooks`);
    return;
  }
  b.say(
    !node
      ? `node ${nodeName} is gone; waiting for it to register again`
      : back
        ? `node ${nodeName} rebooted (boot ID ${node.bootID ?? '?'}); waiting for it to be Ready`
        : `waiting for node ${nodeName} to reboot (boot ID still ${status.bootIDBefore ?? '?'})`,
  );
};

/** The node is down, gone, or back from being down. */
const down: PhaseHandler = (b) => {
  const { node, nodeName, status } = b;
  const back = node !== undefined && node.bootID !== status.bootIDBefore;
  if (node && node.ready && !back) {
    b.say(`waiting for node ${nodeName} to go down`);
    return;
  }
  if (node?.bootID) status.bootIDAfter = node.bootID;
  b.succeed(
    !node
      ? `node ${nodeName} is gone`
      : back && node.ready
        ? `node ${nodeName} was shut down and is back`
        : `node ${nodeName} is down`,
  );
};

/** The change is applied (the mark, or Talos's answer): done once the node is Ready. */
const marked: PhaseHandler = (b) => {
  const { spec, node, nodeName, status, condition } = b;
  // A change on trial (TRY) is done when its checks confirmed it and it is committed.
  if (confirmsTry(b)) {
    confirmTry(b);
    return;
  }
  if (!node?.ready) {
    b.say(`waiting for node ${nodeName} to be Ready`);
    return;
  }
  status.bootIDAfter = node.bootID;
  condition('NodeReturned', 'True', 'Ready', `node ${nodeName} is Ready`);
  b.succeed(`${kindOf(spec).words.done}; node ${nodeName} is Ready`);
};

/** Held until released: it waits in its own phase (held.ts), entered straight from execution. */
const release: PhaseHandler = (b) => {
  b.transition('Held', `${kindOf(b.spec).words.managed}; held out of service until released`);
};

export const WAIT_FOR: { readonly [C in Completion]: PhaseHandler } = {
  reboot: rebooted,
  down,
  mark: marked,
  release,
};

export function waitingForNode(b: DecisionBuilder): void {
  WAIT_FOR[completionOf(b.spec, b.status.execution, b.node?.osImage)](b);
}
