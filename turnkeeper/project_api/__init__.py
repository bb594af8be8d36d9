"""The Python API: :class:`Project` and the records it returns (see docs/python.md)."""

from turnkeeper.project_api.goals import EvidenceRecords, Gates, Goals, Todos
from turnkeeper.project_api.project import GoalStatus, Project, Status
from turnkeeper.project_api.sessions import Sessions

__all__ = [
    "EvidenceRecords",
    "Gates",
    "GoalStatus",
    "Goals",
    "Project",
    "Sessions",
    "Status",
    "Todos",
]
