// ConfigChange: a new machine configuration applied, with or without a reboot (its mode).
// What it does to the node is its disruption class (status.configDisruption), decided
// before the health gate (phases/config-disruption.ts): whether it drains and whether the
// etcd guard holds it follow from the class, not from the mode alone.
import type { DisruptionClass, NodeActionSpec, NodeActionStatus } from '../../api/node-action.ts';
import {
  classifyByMode,
  classifyStated,
  rank,
  type ConfigChangeMode,
} from '../../talos/config-disruption.ts';
import { autoNeverReboots, configChangeSteps } from '../../talos/plan.ts';
import { talosVersionFromOsImage } from '../../talos/version.ts';
import { THROUGH_TALOS, type ActionKind } from './kind.ts';

/**
 * Whether a ConfigChange reboots the node, or may (Auto, except on Talos ≥ 1.14 where
 * AUTO never reboots): Staged applies on a boot the change does not cause, Try and
 * NoReboot apply live. What Talos answers (execution.reboots) overrides it once known.
 */
function reboots(spec: NodeActionSpec, osImage?: string): boolean {
  const mode = spec.configChange?.mode ?? 'Auto';
  return mode === 'Reboot' || (mode === 'Auto' && !autoNeverReboots(spec, osImage));
}

/**
 * The change's disruption class: as recorded before the health gate; before that, the
 * class an External requester states (raised to what the mode needs), else the most
 * disruptive class the mode allows on the node's Talos version (unknown counts as most).
 */
export function disruptionClass(
  spec: NodeActionSpec,
  osImage: string | undefined,
  status: NodeActionStatus | undefined,
): DisruptionClass {
  const recorded = status?.configDisruption?.class;
  if (recorded !== undefined) return recorded;
  const mode: ConfigChangeMode = spec.configChange?.mode ?? 'Auto';
  const version = talosVersionFromOsImage(osImage);
  const stated = spec.configChange?.disruptionClass;
  return stated !== undefined && (spec.execution ?? 'Managed') === 'External'
    ? classifyStated(mode, version, stated).class
    : classifyByMode(mode, version, 'not classified yet').class;
}

/**
 * Classes that restart every pod on the node (CRIRestart) or reboot it: drained first,
 * held by the etcd guard, and prepared for as a reboot (PreRebootJob).
 */
const takesPodsDown = (c: DisruptionClass) => rank(c) >= rank('CRIRestart');

export const configChange: ActionKind = {
  // PreRebootJob for every class: for Reboot and CRIRestart, to the node's workloads, the
  // change is a reboot; for ServiceRestart and None, a person's approval or a change
  // ticket (pre-action hooks too) must gate every configuration change all the same.
  // Hooks tell the classes apart by GATEHOUSE_DISRUPTION_CLASS. See docs/decisions.md.
  preHookKind: 'PreRebootJob',
  managed: { by: 'talos', steps: configChangeSteps },
  // Drained when it reboots or restarts CRI (every pod restarts), not when nothing but a
  // service restarts or nothing at all.
  noDrain: (spec, osImage, status) => {
    const cls = disruptionClass(spec, osImage, status);
    if (takesPodsDown(cls)) return undefined;
    return `the configuration change is classified ${cls}: ${cls === 'None' ? 'nothing on the node restarts' : 'a service restarts, pods keep running'}`;
  },
  // A CRI restart leaves etcd running (Talos runs it outside CRI) but takes the node's
  // control-plane static pods down with every other pod: judged like a reboot.
  etcdGuard: (spec, osImage, status) => takesPodsDown(disruptionClass(spec, osImage, status)),
  restartsPods: (spec, osImage, status) => takesPodsDown(disruptionClass(spec, osImage, status)),
  etcdMember: () => 'down',
  cordonAtEnd: 'lift',
  // Auto (Managed only) may reboot: until the Talos executor reports what Talos
  // decided, it is followed as a change that reboots.
  completion: (spec, execution, osImage) => {
    if (execution?.reboots !== undefined) return execution.reboots ? 'reboot' : 'mark';
    return reboots(spec, osImage) ? 'reboot' : 'mark';
  },
  words: {
    perform: 'apply the configuration change to',
    managed: THROUGH_TALOS,
    done: 'configuration change done',
  },
};
