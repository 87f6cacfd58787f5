// Kubernetes resource quantities ("250m", "1.5Gi", "1e3", "128974848") as plain numbers,
// for the sums a scheduling simulation makes (src/actions/drain-forecast.ts). A Number
// holds every byte count below 8 PiB exactly, and a CPU count to well below a millicore:
// enough to compare requests with what a node allocates, never to write a quantity back.

const BINARY: Record<string, number> = {
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
};

const DECIMAL: Record<string, number> = {
  n: 1e-9,
  u: 1e-6,
  m: 1e-3,
  '': 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
};

const QUANTITY = /^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$/;

/**
 * The quantity as a number of units (cores, bytes, Pods); undefined when it is not one.
 *
 * @example parseQuantity('250m') === 0.25; parseQuantity('1Gi') === 1073741824
 */
export function parseQuantity(quantity: string | number | undefined): number | undefined {
  if (typeof quantity === 'number') return quantity;
  if (quantity === undefined) return undefined;
  const m = QUANTITY.exec(quantity.trim());
  if (!m) return undefined;
  const [, digits = '', exponent, suffix = ''] = m;
  const value = Number(digits) * (exponent ? Number(`1${exponent}`) : 1);
  return value * (BINARY[suffix] ?? DECIMAL[suffix] ?? 1);
}
