"""The builder of a rewritten kernel's body, one concern per module: ``layout`` (the geometry,
the staged arrays and where each lane's elements lie), ``copies`` (staging the operand tiles),
``multiply`` (the reduction loop) and ``epilogue`` (the outputs, and ``Builder.build``)."""
