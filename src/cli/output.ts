// Machine-readable output: -o json (two-space indented, one trailing newline) or
// -o yaml, of documents whose shape each command documents.
import { Option } from 'commander';
import { stringify } from 'yaml';

export type Format = 'text' | 'json' | 'yaml';

export function outputOption(formats: readonly string[] = ['text', 'json', 'yaml']): Option {
  return new Option('-o, --output <format>', 'output format').choices(formats).default('text');
}

export function formatDocument(format: 'json' | 'yaml', document: unknown): string {
  return format === 'json' ? `${JSON.stringify(document, null, 2)}\n` : stringify(document, { lineWidth: 0 });
}
