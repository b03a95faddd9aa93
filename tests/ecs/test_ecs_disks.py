"""The local ECS endpoint's disks: RunInstances' SystemDisk and DataDisk.N become disks that
DescribeDisks lists, and ResizeDisk grows one under ECS's rules (only larger, within the type's
bounds; online only on a Running instance and not for a basic disk). The rules on a fake clock
(quick), then through the official SDK (slow)."""

from __future__ import annotations

from typing import Any

import pytest
from ecs_support import REGION, sdk

from crhelper.local.ecs_server import LocalECS
from crhelper.local.ecs_state import DATA_DISK, RUNNING, SYSTEM_DISK, EcsError, EcsTimings, Fleet, InstanceSpec


def test_disks_come_with_the_instance_and_grow_only_under_the_rules() -> None:
    now = [1000.0]
    fleet = Fleet(timings=EcsTimings.uniform(1.0), clock=lambda: now[0])
    spec = InstanceSpec(data_disks=((30, "cloud_essd"), (100, "cloud")))
    instance = fleet.add(spec, RUNNING)
    system, fast, basic = fleet.disks()
    assert [(d.disk_type, d.size, d.device) for d in (system, fast, basic)] == [
        (SYSTEM_DISK, 40, "/dev/xvda"), (DATA_DISK, 30, "/dev/xvdb"), (DATA_DISK, 100, "/dev/xvdc")]

    def refused(disk_id: str, size: int, online: bool) -> str:
        with pytest.raises(EcsError) as caught:
            fleet.resize_disk(disk_id, size, online)
        return caught.value.code

    assert refused(fast.disk_id, 30, True) == "InvalidDiskSize.TooSmall"      # same size, or smaller: never
    assert refused(fast.disk_id, 40000, True) == "InvalidDiskSize.ValueNotSupported"
    assert refused(basic.disk_id, 2001, False) == "InvalidDiskSize.ValueNotSupported"
    assert refused(basic.disk_id, 200, True) == "InvalidDiskCategory.NotSupported"
    assert refused("d-nope", 50, False) == "InvalidDiskId.NotFound"
    assert fleet.resize_disk(fast.disk_id, 50, online=True).size == 50
    fleet.stop(instance.instance_id)
    assert refused(fast.disk_id, 60, True) == "IncorrectInstanceStatus"        # Stopping: neither way
    now[0] += 2.0
    fleet.advance()
    assert refused(fast.disk_id, 60, True) == "IncorrectInstanceStatus"        # Stopped: offline only
    assert fleet.resize_disk(fast.disk_id, 60, online=False).size == 60
    fleet.delete(instance.instance_id, force=True)
    assert fleet.disks() == []


@pytest.mark.slow
def test_describe_and_resize_disks_through_the_sdk(ecs: LocalECS) -> None:
    m = sdk("alibabacloud_ecs20140526.models")
    errors = sdk("alibabacloud_tea_openapi.exceptions")
    client = ecs.client()
    ids = client.run_instances(m.RunInstancesRequest(
        region_id=REGION, amount=1, system_disk=m.RunInstancesRequestSystemDisk(size=50, category="cloud_essd"),
        data_disk=[m.RunInstancesRequestDataDisk(size=20, category="cloud_essd"),
                   m.RunInstancesRequestDataDisk(size=40, category="cloud_ssd")])).body.instance_id_sets.instance_id_set

    def disks(**filters: Any) -> list[Any]:
        body = client.describe_disks(m.DescribeDisksRequest(region_id=REGION, instance_id=ids[0], **filters)).body
        return list(body.disks.disk)

    assert [(d.type, d.size, d.category) for d in disks()] == [
        ("system", 50, "cloud_essd"), ("data", 20, "cloud_essd"), ("data", 40, "cloud_ssd")]
    first = disks(disk_type="data")[0]
    assert first.instance_id == ids[0] and first.status == "In_use" and first.device == "/dev/xvdb"
    assert ecs.wait_for_status(ids[0], "Running", 5)
    client.resize_disk(m.ResizeDiskRequest(disk_id=first.disk_id, new_size=80, type="online"))
    assert [d.size for d in disks(disk_ids=f'["{first.disk_id}"]')] == [80]
    with pytest.raises(errors.ClientException) as caught:
        client.resize_disk(m.ResizeDiskRequest(disk_id=first.disk_id, new_size=60))
    assert caught.value.code == "InvalidDiskSize.TooSmall" and "cannot shrink" in caught.value.message
    with pytest.raises(errors.ClientException) as caught:
        client.resize_disk(m.ResizeDiskRequest(disk_id=first.disk_id))
    assert caught.value.code == "MissingParameter" and "NewSize" in caught.value.message
    with pytest.raises(errors.ClientException) as caught:
        client.run_instances(m.RunInstancesRequest(region_id=REGION, data_disk=[m.RunInstancesRequestDataDisk(size=5)]))
    assert "DataDisk.1.Size" in caught.value.message
