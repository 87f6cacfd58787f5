// Feeds a body to a streaming decoder in pieces cut at the given offsets (any order, repeats
// allowed), as a socket may deliver it.
export function writeInCuts(
  decoder: { write(chunk: Buffer): void },
  body: Buffer,
  cuts: readonly number[],
): void {
  let from = 0;
  for (const cut of [...new Set(cuts)].sort((a, b) => a - b)) {
    decoder.write(body.subarray(from, cut));
    from = cut;
  }
  decoder.write(body.subarray(from));
}
