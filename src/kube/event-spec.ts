// An Event to record, as data: what the pure cores (src/boots/decide.ts) return and the
// EventRecorder (events.ts) writes.
export interface EventSpec {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}
