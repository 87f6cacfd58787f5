// A ConfigChange's disruption class, decided once at the door of the health gate (before
// anything about the drain, the etcd guard or the pre-action hooks is judged) and recorded
// in status.configDisruption: compared from the node's running configuration and the new
// one (Managed), stated by the requester (External), or the most disruptive the mode
// allows when nothing can be compared (src/talos/config-disruption.ts).
import type { ConfigDisruption } from '../../api/node-action.ts';
import {
  classifyByMode,
  classifyConfigChange,
  classifyStated,
  type ConfigChangeClass,
  type ConfigChangeMode,
} from '../../talos/config-disruption.ts';
import { formatTalosVersion, talosVersionFromOsImage } from '../../talos/version.ts';
import { errorMessage } from '../../wait.ts';
import type { DecisionBuilder } from '../decision.ts';
import { kindOf } from '../kinds/index.ts';
import { performsHere } from '../subject.ts';

type Decided = ConfigChangeClass & { basis: ConfigDisruption['basis'] };

/** The class of the action's change, or undefined when the configurations must be read first. */
function decideClass(b: DecisionBuilder): Decided | undefined {
  const { spec, input, node } = b;
  const mode: ConfigChangeMode = spec.configChange?.mode ?? 'Auto';
  const version = talosVersionFromOsImage(node?.osImage);
  const byMode = (why: string): Decided => ({ ...classifyByMode(mode, version, why), basis: 'Mode' });
  if ((spec.execution ?? 'Managed') === 'External') {
    const stated = spec.configChange?.disruptionClass;
    return stated !== undefined
      ? { ...classifyStated(mode, version, stated), basis: 'Stated' }
      : byMode(
          'External execution: gatehouse has no configuration to compare, and spec.configChange.disruptionClass states none',
        );
  }
  if (mode === 'Reboot' || mode === 'Staged') return byMode(`mode ${mode} decides it`);
  if (!performsHere(kindOf(spec), input))
    return byMode("this controller performs no Talos call, so it cannot read the node's configuration");
  const read = input.configs;
  if (!read) return undefined;
  if (read.current === undefined || read.next === undefined)
    return byMode(`the configurations could not be compared (${read.error ?? 'not read'})`);
  try {
    return {
      ...classifyConfigChange({ mode, version, current: read.current, next: read.next }),
      basis: 'Compared',
    };
  } catch (error) {
    return byMode(`the configurations could not be compared (${errorMessage(error)})`);
  }
}

/**
 * Decides and records the class of a ConfigChange not yet classified; true once it is
 * (or the action is no ConfigChange), false while the configurations are being read.
 */
export function classified(b: DecisionBuilder): boolean {
  const { spec, status, nodeName, now, event } = b;
  if (spec.action !== 'ConfigChange' || status.configDisruption !== undefined) return true;
  const decided = decideClass(b);
  if (!decided) {
    b.say(`reading the configuration node ${nodeName} runs, to classify the change`);
    b.readConfigs();
    return false;
  }
  const version = talosVersionFromOsImage(b.node?.osImage);
  status.configDisruption = {
    class: decided.class,
    basis: decided.basis,
    ...(version ? { talosVersion: formatTalosVersion(version) } : {}),
    ...(decided.paths.length > 0 ? { paths: decided.paths } : {}),
    message: decided.message.slice(0, 4096),
    time: now.toISOString(),
  };
  event('Normal', 'Classified', `ConfigChange of node ${nodeName} classified ${decided.message}`);
  return true;
}
