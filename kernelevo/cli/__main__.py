"""`python -m kernelevo.cli`, as the `kernelevo` script. Nothing imports this module, so its import of the
package cannot close a cycle."""
from kernelevo.cli import main

main()
