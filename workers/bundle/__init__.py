"""The served bundle: model cards, hot reload of a promoted bundle, the shadowed challenger, and their metrics."""
