// What the controller reads to classify a ConfigChange (config-disruption.ts): the
// configuration the node runs, through the Talos API (the COSI MachineConfig resource, as
// `talosctl get machineconfig` reads it), and the new one from the action's Secret. The
// executor reads them (execution.ts readConfigs) when the decision core asks
// (DecisionBuilder.readConfigs) and hands them back as ActionInput.configs. In memory
// only: the texts hold the cluster's secrets and are never written anywhere.

/** Both configurations, or why they could not be read. */
export interface ConfigRead {
  at: Date;
  /** The configuration the node runs now. */
  current?: string;
  /** The configuration the action applies. */
  next?: string;
  /** Why the read failed (then the class is the most disruptive the mode allows). */
  error?: string;
}

/** How long each read may take. */
export const CONFIG_READ_TIMEOUT_MS = 10_000;
