// The sandbox (sandbox/) and the demo (src/demo) are the test bed, not the controller:
// only `gatehouse sandbox` and `gatehouse demo` load them, when they run, so no other
// command (above all `controller`) carries their code, and the container image and the
// npm package leave them out (scripts/image-rootfs.sh, package.json's files). Checked
// by test/unit/test-bed-isolation.test.ts.
import { CliError, EXIT } from './exit.ts';

/** Loads a test-bed module, saying what to do where it is not installed (the image). */
export async function loadTestBed<T>(command: string, load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (error) {
    if ((error as { code?: unknown }).code === 'ERR_MODULE_NOT_FOUND') {
      throw new CliError(
        `gatehouse ${command} runs from a clone of the gatehouse repository (npm ci, then npx gatehouse ${command}); this installation, like the container image, has no test bed (${(error as Error).message})`,
        EXIT.usage,
      );
    }
    throw error;
  }
}
