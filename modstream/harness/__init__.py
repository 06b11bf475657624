"""The harness: demo, bench, chaos and the loop trial. The product's own commands never import it."""
