"""The provider contract suite: the rules ROS relies on, checked against any provider in-process."""

from .harness import Call, Harness
from .suite import CHECKS, CheckResult, ContractReport, run_contract

__all__ = ["CHECKS", "Call", "CheckResult", "ContractReport", "Harness", "run_contract"]
