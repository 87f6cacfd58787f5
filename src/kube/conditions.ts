// Standard conditions (metav1.Condition) on a status: set one, keeping its transition
// time while its status stays the same, as Kubernetes' meta.SetStatusCondition does.
export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  observedGeneration?: number;
  lastTransitionTime: string;
  reason: string;
  message: string;
}

export function setCondition(
  conditions: readonly Condition[] | undefined,
  next: Omit<Condition, 'lastTransitionTime'>,
  now: Date,
): Condition[] {
  const list = [...(conditions ?? [])];
  const index = list.findIndex((c) => c.type === next.type);
  const existing = index >= 0 ? list[index] : undefined;
  const condition: Condition = {
    ...next,
    message: next.message.slice(0, 32768),
    lastTransitionTime:
      existing && existing.status === next.status ? existing.lastTransitionTime : now.toISOString(),
  };
  if (index >= 0) list[index] = condition;
  else list.push(condition);
  return list;
}

export function findCondition(
  conditions: readonly Condition[] | undefined,
  type: string,
): Condition | undefined {
  return conditions?.find((c) => c.type === type);
}
