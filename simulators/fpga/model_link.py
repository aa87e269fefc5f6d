"""A link to the device's integer golden model instead of its RTL.

:class:`ModelLink` answers the same commands as
:class:`~polyhal.simulators.fpga.link.SimulationLink`, with the same
results and status codes, by running them on
:class:`~polyhal.simulators.fpga.golden.DeviceModel` in this process: no HDL
simulator, no cycle counts (the cycle fields of its status words are 0; the
MAC-beat counter is the model's). It is the smallest complete example of the
link a board driver implements (docs/fpga.md, "A board instead of the
simulator"), and a fast functional stand-in while a driver is developed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from polyhal.simulators.fpga.build import DEVICE, check_parameters
from polyhal.simulators.fpga.golden import DeviceModel, bytes_to_words, words_to_bytes
from polyhal.simulators.fpga.wire import Command, Reply


class ModelLink:
    """The device's golden model behind the host driver's link interface."""

    def __init__(self, parameters: Mapping[str, int] | None = None) -> None:
        self.parameters = check_parameters(parameters, DEVICE)
        self.generation = 0
        """Incremented at every start: device memory is blank in a new generation."""
        self._model: DeviceModel | None = None

    def start(self) -> None:
        """Power the model up (blank buffers) unless it is up."""
        if self._model is None:
            self._model = DeviceModel.from_parameters(self.parameters)
            self.generation += 1

    def transact(self, commands: Sequence[Command]) -> list[Reply]:
        """Run ``commands`` in order; a command with a non-zero status ends the batch."""
        self.start()
        assert self._model is not None
        width = self.parameters["WORD_BYTES"]
        replies = []
        for command in commands:
            payload = bytes_to_words(command.payload, width)
            status, data = self._model.execute(command.opcode, command.args, payload)
            beats = self._model.mac_beats
            fields = (command.opcode, status, 0, 0, beats & 0xFFFFFFFF, beats >> 32, 0, 0)
            replies.append(Reply(fields, words_to_bytes(data, width)))
            if status:
                break
        return replies

    def close(self) -> None:
        """Power the model down (its buffers are lost)."""
        self._model = None
