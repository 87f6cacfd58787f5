// Kubernetes time formats.

/** metav1.Time: RFC 3339, whole seconds. */
export function rfc3339(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** metav1.MicroTime (Lease renewTime and acquireTime): RFC 3339 with microseconds. */
export function rfc3339Micro(date: Date): string {
  return date.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}
